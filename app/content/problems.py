"""Content problems, each with the file and line it is about."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import yaml


@dataclass(frozen=True)
class Problem:
    path: str
    line: int
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}"


class ContentError(Exception):
    """Invalid content; ``problems`` lists ``file:line: message`` strings."""

    def __init__(self, problems: list[Problem]):
        self.problems = problems
        super().__init__("\n".join(str(p) for p in problems))


def key_lines(node: yaml.Node | None, prefix: tuple[Any, ...] = ()) -> dict[tuple[Any, ...], int]:
    """Map every key path in a YAML node tree to its 1-based line."""
    out: dict[tuple[Any, ...], int] = {}
    if isinstance(node, yaml.MappingNode):
        for k, v in node.value:
            path = (*prefix, k.value)
            out[path] = k.start_mark.line + 1
            out.update(key_lines(v, path))
    elif isinstance(node, yaml.SequenceNode):
        for i, v in enumerate(node.value):
            path = (*prefix, i)
            out[path] = v.start_mark.line + 1
            out.update(key_lines(v, path))
    return out


def line_for(loc: Iterable[Any], lines: dict[tuple[Any, ...], int], offset: int) -> int:
    """The line of the deepest key of ``loc`` that the YAML has, plus ``offset``."""
    path = tuple(loc)
    while path:
        if path in lines:
            return lines[path] + offset
        path = path[:-1]
    return 1 + offset


def line_of_text(source: str, needle: str) -> int:
    """1-based line of the first occurrence of ``needle`` in a file (1 if absent)."""
    i = source.find(needle)
    return source.count("\n", 0, i) + 1 if i >= 0 else 1

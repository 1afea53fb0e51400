"""The map and the recipes name files that exist.

``docs/architecture.md`` draws the tree and ``CONTRIBUTING.md`` gives the recipes (a lab,
a chart, a GPU, a format, a term card, an exercise). Both rot silently when code moves, so
every path and every dotted module they name in backticks (or in the tree drawings) is
checked against the checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ("docs/architecture.md", "CONTRIBUTING.md")
TOP = ("app", "labs", "tests", "docs", "content", "templates", "static", "benchmarks", "migrations")

CODE_SPAN = re.compile(r"`([^`\n]+)`")
LINK = re.compile(r"\]\(([^)#\s]+)\)")
# A tree line: "labs/", "├─ runtime/  …", "│   store  …".
TREE_ROOT = re.compile(r"^(app|labs|tests)/\s")
PLACEHOLDER = re.compile(r"[<>{}…*]|\.\.\.")


def _path_like(token: str) -> bool:
    token = token.strip()
    if PLACEHOLDER.search(token) or " " in token or token.startswith(("/", ".venv", "http")):
        return False
    first = token.split("/", 1)[0]
    return "/" in token and first in TOP or token in {"README.md", "Makefile", "pyproject.toml"}


def _file_exists(path: str, here: Path) -> bool:
    """``app/ratelimit.client_key`` names a function of ``app/ratelimit.py``."""
    if (ROOT / path).exists() or (here / path).exists():
        return True
    stem, _, attr = path.rpartition(".")
    return bool(stem) and attr.isidentifier() and (ROOT / f"{stem}.py").is_file()


def _module_like(token: str) -> bool:
    return bool(re.fullmatch(r"(app|labs)(\.[a-z_][a-z0-9_]*)+", token))


def _module_exists(dotted: str) -> bool:
    """Some prefix of two or more parts is a module or package of this checkout
    (``labs.catalog.gpus.get_gpu`` names a function of ``labs.catalog.gpus``)."""
    parts = dotted.split(".")
    for n in range(len(parts), 1, -1):
        base = ROOT.joinpath(*parts[:n])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return True
    return False


def named_paths(doc: str) -> tuple[set[str], set[str]]:
    text = (ROOT / doc).read_text(encoding="utf-8")
    paths: set[str] = set()
    modules: set[str] = set()
    for token in CODE_SPAN.findall(text) + LINK.findall(text):
        token = token.split(":", 1)[0].strip()  # "app/templating.py: StaticManifest"
        if _path_like(token):
            paths.add(token.rstrip("/"))
        elif _module_like(token):
            modules.add(token)
    return paths, modules


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_a_doc_names_exists(doc: str) -> None:
    paths, modules = named_paths(doc)
    assert len(paths) + len(modules) >= 20, f"{doc}: the check found too few names to mean anything"
    here = (ROOT / doc).parent
    missing = sorted(p for p in paths if not _file_exists(p, here))
    assert not missing, f"{doc} names paths that do not exist: {missing}"
    gone = sorted(m for m in modules if not _module_exists(m))
    assert not gone, f"{doc} names modules that do not exist: {gone}"


def test_the_architecture_tree_names_modules_that_exist() -> None:
    """The drawn tree under ``labs/`` and ``app/``: each entry whose name ends in ``/`` is a
    folder, each plain name a module or package of the folder above it."""
    text = (ROOT / "docs/architecture.md").read_text(encoding="utf-8")
    trees = re.findall(r"```\n(.*?)```", text, flags=re.S)
    checked = 0
    for tree in trees:
        lines = tree.splitlines()
        if not lines or not TREE_ROOT.match(lines[0]):
            continue  # not a source tree (the sequence diagram)
        stack: list[tuple[int, str]] = [(-1, lines[0].split()[0].rstrip("/"))]
        for line in lines[1:]:
            # An entry is "├─ name" or "└─ name"; other lines continue a description.
            m = re.match(r"^([│ ]*)[├└]─ ([A-Za-z_][\w.]*/?)", line)
            if not m:
                if TREE_ROOT.match(line):  # a second root in the same drawing
                    stack = [(-1, line.split()[0].rstrip("/"))]
                continue
            depth, name = len(m.group(1)), m.group(2)
            while stack[-1][0] >= depth:
                stack.pop()
            path = f"{stack[-1][1]}/{name.rstrip('/')}"
            target = ROOT / path
            exists = target.exists() or target.with_suffix(".py").exists()
            assert exists, f"docs/architecture.md draws {path!r}, which is not in the tree"
            checked += 1
            if name.endswith("/"):
                stack.append((depth, path))
    assert checked >= 10, "no source tree found in docs/architecture.md"

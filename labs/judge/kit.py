"""The grading kit: exercises as folders, and grading a learner's return values.

An exercise is one folder ``content/exercises/<id>/``: ``README.md`` (front matter
``title, concepts, language, entry, time_limit_s, hints``; the body is the task),
``starter.py``, ``solution.py`` and ``tests.py``. ``tests.py`` is trusted code: its
``cases()`` returns ``Case`` objects, each with the arguments for the learner's
function (built from a seeded generator), a reference (computed here with
``labs.quant`` or the model-lab library, never by the learner's code) and a check that
turns expected and got into a teaching message (``labs.judge.compare``).

Grading runs outside the sandbox. Only the learner's functions run inside it, through
an ``execute(calls) -> list[CallResult]`` the caller supplies: the judge's sandbox in
the worker, ``run_locally`` (same wire encoding, in this process) for the content check
and the unit tests. Loading an exercise imports no torch; grading imports its tests.
"""

from __future__ import annotations

import importlib.util
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Literal, NamedTuple

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from labs.judge.local import SOLUTION_FILE, Call, CallResult, run_locally

__all__ = [
    "SOLUTION_FILE",
    "Call",
    "CallResult",
    "Case",
    "Exercise",
    "ExerciseError",
    "TestResult",
    "Verdict",
    "grade",
    "load_all",
    "load_exercise",
    "run_locally",
]

MODES = ("examples", "submit")
ID_RE = re.compile(r"^[a-z0-9]+(?:[-_.][a-z0-9]+)*$")
ENTRY_RE = re.compile(r"^([A-Za-z_]\w*)\(.*\)(?:\s*->\s*.+)?$")
FILES = ("README.md", "starter.py", "solution.py", "tests.py")
Execute = Callable[[list[Call]], Sequence[CallResult]]


class ExerciseError(ValueError):
    """An exercise folder that is not valid; the message names the file."""


class Verdict(NamedTuple):
    """What a check says about one learner value."""

    passed: bool
    message: str
    detail: dict[str, Any] = {}


@dataclass(frozen=True)
class TestResult:
    """One graded case: ``detail`` holds the structured comparison and the timings."""

    __test__ = False  # not a pytest class

    name: str
    passed: bool
    message: str
    detail: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Case:
    """One call of the learner's function and how to judge what it returns.

    ``reference()`` gives the expected value (trusted code, timed); ``check(expected,
    got)`` compares and explains. ``example`` cases are shown to the learner and run by
    "Run tests"; the others are hidden and run only on "Submit".
    """

    name: str
    args: tuple[Any, ...]
    reference: Callable[[], Any]
    check: Callable[[Any, Any], Verdict]
    example: bool = False
    function: str | None = None  # default: the exercise's entry function


class Front(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    title: str = Field(min_length=3, max_length=80)
    concepts: list[str] = Field(min_length=1)
    language: Literal["python", "triton"]
    entry: str = Field(
        pattern=ENTRY_RE.pattern, description="the learner's function and its signature"
    )
    time_limit_s: float = Field(
        gt=0, le=60, description="wall-time limit of one submission, seconds"
    )
    hints: list[str] = Field(min_length=1)


@dataclass(frozen=True)
class Exercise:
    id: str
    title: str
    concepts: tuple[str, ...]
    language: Literal["python", "triton"]
    entry: str
    time_limit_s: float
    hints: tuple[str, ...]
    body: str  # Markdown: the task
    starter: str
    solution: str
    path: Path  # the folder

    @property
    def function(self) -> str:
        """The name of the function the learner defines (from ``entry``)."""
        match = ENTRY_RE.match(self.entry)
        assert match  # validated by Front
        return match.group(1)

    def cases(self) -> list[Case]:
        """The exercise's cases, examples first (imports its tests.py, and so torch)."""
        module = _tests_module(self.path / "tests.py")
        if "_lowbit_cases" not in vars(module):  # seeded, so the same every time: build once
            module._lowbit_cases = module.cases()
        made = module._lowbit_cases
        cases = [c for c in made if c.example] + [c for c in made if not c.example]
        if not all(isinstance(c, Case) for c in cases):
            raise ExerciseError(f"{self.id}/tests.py: cases() must return Case objects")
        return cases


def _split_front(text: str, where: str) -> tuple[dict[str, Any], str]:
    if not text.startswith("---\n"):
        raise ExerciseError(f"{where}: must start with '---' YAML front matter")
    end = text.find("\n---\n", 4)
    if end < 0:
        raise ExerciseError(f"{where}: the front matter is not closed by a '---' line")
    try:
        front = yaml.safe_load(text[4 : end + 1])
    except yaml.YAMLError as e:
        raise ExerciseError(f"{where}: front matter is not valid YAML: {e}") from None
    if not isinstance(front, dict):
        raise ExerciseError(f"{where}: front matter must be a mapping")
    return front, text[end + 5 :].strip() + "\n"


def load_exercise(path: Path) -> Exercise:
    """Read and validate one exercise folder (no torch, no tests run)."""
    ex_id = path.name
    if not ID_RE.match(ex_id):
        raise ExerciseError(f"{ex_id}: an exercise id is lowercase letters, digits and - _ .")
    missing = [f for f in FILES if not (path / f).is_file()]
    if missing:
        raise ExerciseError(f"{ex_id}: missing {', '.join(missing)}")
    raw, body = _split_front((path / "README.md").read_text(encoding="utf-8"), f"{ex_id}/README.md")
    try:
        front = Front.model_validate(raw)
    except ValidationError as e:
        errors = "; ".join(f"{'.'.join(map(str, err['loc']))}: {err['msg']}" for err in e.errors())
        raise ExerciseError(f"{ex_id}/README.md: {errors}") from None
    if len(body.strip()) < 200:
        raise ExerciseError(f"{ex_id}/README.md: the task (the body) is missing or too short")
    return Exercise(
        id=ex_id,
        title=front.title,
        concepts=tuple(front.concepts),
        language=front.language,
        entry=front.entry,
        time_limit_s=front.time_limit_s,
        hints=tuple(front.hints),
        body=body,
        starter=(path / "starter.py").read_text(encoding="utf-8"),
        solution=(path / "solution.py").read_text(encoding="utf-8"),
        path=path,
    )


def load_all(content_dir: Path) -> dict[str, Exercise]:
    """Every exercise under ``content_dir/exercises``, by id, in id order.

    Each concept must be a term card (``content_dir/terms/<slug>.md``).
    """
    root = content_dir / "exercises"
    exercises: dict[str, Exercise] = {}
    for folder in sorted(
        p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    ):
        ex = load_exercise(folder)
        unknown = [c for c in ex.concepts if not (content_dir / "terms" / f"{c}.md").is_file()]
        if unknown:
            raise ExerciseError(f"{ex.id}/README.md: concepts {unknown} are not term cards")
        exercises[ex.id] = ex
    return exercises


_MODULES: dict[tuple[Path, float], ModuleType] = {}


def _tests_module(path: Path) -> Any:
    """tests.py as a module, loaded once per file version."""
    key = (path.resolve(), path.stat().st_mtime)
    if key not in _MODULES:
        name = "lowbit_exercise_tests_" + re.sub(r"\W", "_", path.parent.name)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec and spec.loader
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        if not callable(getattr(module, "cases", None)):
            raise ExerciseError(f"{path.parent.name}/tests.py: defines no cases()")
        _MODULES[key] = module
    return _MODULES[key]


def grade(ex: Exercise, mode: str, execute: Execute) -> list[TestResult]:
    """Run the learner's function on each case of ``mode`` and judge each result.

    ``mode`` is "examples" (the visible cases) or "submit" (all of them). ``execute``
    runs every call in one go (in the sandbox) and returns one result per call; a
    missing result (the run ended early) fails its case with a message saying so.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}: use one of {', '.join(MODES)}")
    cases = [c for c in ex.cases() if mode == "submit" or c.example]
    results = list(execute([Call(c.function or ex.function, c.args) for c in cases]))
    graded = []
    for i, case in enumerate(cases):
        result = results[i] if i < len(results) else None
        graded.append(_judge(case, result))
    return graded


def _judge(case: Case, result: CallResult | None) -> TestResult:
    if result is None:
        return TestResult(
            case.name, False, "not run: the submission ended before this case (time limit?)"
        )
    detail: dict[str, Any] = {"learner_s": round(result.seconds, 6)}
    if result.error is not None:
        return TestResult(
            case.name, False, f"your function raised an error:\n{result.error}", detail
        )
    start = time.perf_counter()
    expected = case.reference()
    detail["reference_s"] = round(time.perf_counter() - start, 6)
    try:
        verdict = case.check(expected, result.value)
    except Exception as e:  # noqa: BLE001 - a learner value no check foresaw is a failure, not a crash
        verdict = Verdict(
            False, f"your result could not be compared with the reference: {type(e).__name__}: {e}"
        )
    detail.update(verdict.detail)
    return TestResult(case.name, verdict.passed, verdict.message, detail)

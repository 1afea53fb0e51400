"""Every exercise passes with its reference solution and fails with known-wrong ones.

A wrong solution is ``wrong/<exercise id>_<mistake>.py``; its first line says what the
grader must say: ``# expect: <words of the likely cause>``, or ``# expect: -`` where the
mistake has no recognisable cause (it must still fail).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from labs.judge.kit import grade, load_all, run_locally

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = load_all(ROOT / "content")
WRONG = sorted((Path(__file__).parent / "wrong").glob("*.py"))


def exercise_of(path: Path) -> str:
    """The exercise a wrong solution belongs to: the longest id followed by '_'."""
    return max((i for i in EXERCISES if path.stem.startswith(i + "_")), key=len, default="?")


def _run(code: str):
    return lambda calls: run_locally(code, calls)


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_reference_solution_passes_every_case(ex_id):
    ex = EXERCISES[ex_id]
    results = grade(ex, "submit", _run(ex.solution))
    assert results and all(r.passed for r in results), [
        (r.name, r.message) for r in results if not r.passed
    ]
    assert any(c.example for c in ex.cases()) and any(not c.example for c in ex.cases())


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_starter_does_not_pass(ex_id):
    ex = EXERCISES[ex_id]
    assert not all(r.passed for r in grade(ex, "examples", _run(ex.starter)))


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_each_exercise_has_at_least_two_wrong_solutions(ex_id):
    assert len([p for p in WRONG if exercise_of(p) == ex_id]) >= 2


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_solution_fails_and_the_likely_cause_is_named(path):
    ex_id = exercise_of(path)
    code = path.read_text(encoding="utf-8")
    expect = code.splitlines()[0].removeprefix("# expect:").strip()
    results = grade(EXERCISES[ex_id], "submit", _run(code))
    failed = [r for r in results if not r.passed]
    assert failed, f"{path.name} passed every case"
    if expect != "-":
        causes = [r.detail.get("likely_cause") or "" for r in failed]
        assert any(expect in c for c in causes), (expect, [r.message for r in failed])


def test_triton_references_run_interpreted_whatever_the_environment_says(monkeypatch):
    """In the full suite every Triton reference failed with "Cannot call @triton.jit'd
    outside of the scope of a kernel": the kernels had been decorated compiled, since
    run_locally only set TRITON_INTERPRET by default and an earlier value won."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    ex = EXERCISES["triton-block-absmax"]
    results = grade(ex, "submit", _run(ex.solution))
    assert all(r.passed for r in results), [(r.name, r.message[:200]) for r in results]

"""Every exercise passes with its reference solution and fails with known-wrong ones.

A wrong solution is ``wrong/<exercise id>_<mistake>.py``; its first line says what the
grader must say: ``# expect: <words of the likely cause>``, or ``# expect: -`` where the
mistake has no recognisable cause (it must still fail).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from labs.judge.kit import grade, load_all, run_locally

ROOT = Path(__file__).resolve().parents[3]
EXERCISES = load_all(ROOT / "content")
WRONG = sorted((Path(__file__).parent / "wrong").glob("*.py"))


def exercise_of(path: Path) -> str:
    """The exercise a wrong solution belongs to: the longest id followed by '_'."""
    return max((i for i in EXERCISES if path.stem.startswith(i + "_")), key=len, default="?")


# In the full suite every Triton reference failed "Cannot call @triton.jit'd outside of
# the scope of a kernel", never alone: an earlier test had imported triton.language
# before the interpreter was forced, so Triton's own @jit helpers (tl.max, tl.sum…)
# were decorated compiled, and an interpreted kernel cannot call them
# (test_why_triton_cases_need_a_fresh_interpreter shows it). The Triton cases therefore
# run in a fresh interpreter of their own: test_triton_exercises_in_a_fresh_interpreter
# runs this file's Triton cases there, with every assertion below.
CHILD = "LOWBIT_TRITON_CHILD"


def _is_triton(ex_id: str) -> bool:
    return EXERCISES[ex_id].language == "triton"


def _here_or_in_the_child(ex_id: str) -> None:
    if _is_triton(ex_id) and not os.environ.get(CHILD):
        pytest.skip("a Triton exercise: graded in a fresh interpreter (see CHILD)")


def _run(code: str):
    return lambda calls: run_locally(code, calls)


def test_triton_exercises_in_a_fresh_interpreter() -> None:
    if os.environ.get(CHILD):
        pytest.skip("this is the child")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k", "triton"],
        env={**os.environ, CHILD: "1", "TRITON_INTERPRET": "1"},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    assert " passed" in out.stdout and " failed" not in out.stdout


LATE_INTERPRETER = """
import sys, torch
if sys.argv[1] == "late":
    import triton.language  # what some earlier test of a long session did
from labs.judge.local import _interpret_triton
_interpret_triton()
import triton, triton.language as tl

@triton.jit
def k(x_ptr, out_ptr, BLOCK: tl.constexpr):
    v = tl.load(x_ptr + tl.arange(0, BLOCK))
    tl.store(out_ptr, tl.max(v, axis=0))

x, out = torch.arange(32.0), torch.empty(1)
try:
    k[(1,)](x, out, BLOCK=32)
    print(type(tl.max).__name__, out.item())
except Exception as e:
    print(type(tl.max).__name__, e)
"""


@pytest.mark.parametrize(
    ("when", "expect"),
    [
        ("early", ["InterpretedFunction 31.0"]),
        ("late", ["JITFunction ", "Cannot call @triton.jit'd outside of the scope of a kernel"]),
    ],
)
def test_why_triton_cases_need_a_fresh_interpreter(when, expect):
    """The root cause of the isolation above: forcing the interpreter after
    triton.language was imported leaves tl.max compiled. Should Triton ever change
    that, the "late" case fails and the isolation may go."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    out = subprocess.run(
        [sys.executable, "-c", LATE_INTERPRETER, when],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert all(part in out.stdout for part in expect), out.stdout[-2000:] + out.stderr[-2000:]


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_reference_solution_passes_every_case(ex_id):
    _here_or_in_the_child(ex_id)
    ex = EXERCISES[ex_id]
    results = grade(ex, "submit", _run(ex.solution))
    assert results and all(r.passed for r in results), [
        (r.name, r.message) for r in results if not r.passed
    ]
    assert any(c.example for c in ex.cases()) and any(not c.example for c in ex.cases())


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_starter_does_not_pass(ex_id):
    _here_or_in_the_child(ex_id)
    ex = EXERCISES[ex_id]
    assert not all(r.passed for r in grade(ex, "examples", _run(ex.starter)))


@pytest.mark.parametrize("ex_id", sorted(EXERCISES))
def test_each_exercise_has_at_least_two_wrong_solutions(ex_id):
    assert len([p for p in WRONG if exercise_of(p) == ex_id]) >= 2


@pytest.mark.parametrize("path", WRONG, ids=[p.stem for p in WRONG])
def test_wrong_solution_fails_and_the_likely_cause_is_named(path):
    ex_id = exercise_of(path)
    _here_or_in_the_child(ex_id)
    code = path.read_text(encoding="utf-8")
    expect = code.splitlines()[0].removeprefix("# expect:").strip()
    results = grade(EXERCISES[ex_id], "submit", _run(code))
    failed = [r for r in results if not r.passed]
    assert failed, f"{path.name} passed every case"
    if expect != "-":
        causes = [r.detail.get("likely_cause") or "" for r in failed]
        assert any(expect in c for c in causes), (expect, [r.message for r in failed])


def test_triton_references_run_interpreted_whatever_the_environment_says(monkeypatch):
    _here_or_in_the_child("triton-block-absmax")
    """In the full suite every Triton reference failed with "Cannot call @triton.jit'd
    outside of the scope of a kernel": the kernels had been decorated compiled, since
    run_locally only set TRITON_INTERPRET by default and an earlier value won."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    ex = EXERCISES["triton-block-absmax"]
    results = grade(ex, "submit", _run(ex.solution))
    assert all(r.passed for r in results), [(r.name, r.message[:200]) for r in results]

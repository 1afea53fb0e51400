"""app.runs.judging against the real sandbox and the real exercises: references pass,
verdicts are named as Exercism's runner names them, a passing Q8_0 quantizer is proved
on the shipped model beside lowbit's own."""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from app.runs.judging import Grading
from app.settings import ROOT, Settings

pytestmark = pytest.mark.skipif(
    shutil.which("bwrap") is None, reason="make install adds bubblewrap"
)


@pytest.fixture(scope="module")
def grading() -> Iterator[Grading]:
    g = Grading(Settings(env="test", content_dir=ROOT / "content"))
    try:
        yield g
    finally:
        g.close()


def test_a_passing_q8_0_quantizer_is_proved_on_the_model(grading: Grading) -> None:
    ex = grading.exercises()["q8_0-quantize"]
    v = grading.grade(ex.id, "submit", ex.solution)
    assert v.verdict == "passed" and all(t["passed"] for t in v.tests)
    proof = v.model_proof
    assert proof is not None and "error" not in proof, proof
    assert proof["identical_tensors"] == proof["tensors"] > 0
    assert proof["learner"]["kl_divergence"] == pytest.approx(proof["reference"]["kl_divergence"])
    assert v.sandbox["seccomp"]["enabled"]


def test_examples_only_and_no_proof_on_run_tests(grading: Grading) -> None:
    ex = grading.exercises()["q8_0-quantize"]
    v = grading.grade(ex.id, "examples", ex.solution)
    assert v.verdict == "passed" and v.model_proof is None
    assert len(v.tests) < len(grading.grade(ex.id, "submit", ex.starter).tests)


@pytest.mark.parametrize(
    ("code", "verdict", "says"),
    [
        ("def quantize(x:\n", "error", "SyntaxError"),
        ("import no_such_module\n", "error", "ModuleNotFoundError"),
        ("def quantize(x):\n    return b''\n", "failed", None),
        ("def quantize(x):\n    while True:\n        pass\n", "timed_out", "time limit"),
    ],
)
def test_verdicts(grading: Grading, code: str, verdict: str, says: str | None) -> None:
    v = grading.grade("q8_0-quantize", "examples", code)
    assert v.verdict == verdict, (v.verdict, v.message)
    if says:
        assert says in (v.message or "")


def test_unknown_exercise_is_an_error(grading: Grading) -> None:
    v = grading.grade("no-such-exercise", "examples", "x = 1")
    assert v.verdict == "error" and "no-such-exercise" in (v.message or "")


def exercise_ids() -> list[str]:
    return sorted(
        p.name for p in (ROOT / "content" / "exercises").iterdir() if (p / "tests.py").is_file()
    )


@pytest.mark.parametrize("exercise_id", exercise_ids())
def test_every_reference_solution_passes_inside_the_sandbox(
    grading: Grading, exercise_id: str
) -> None:
    # lowbit content check runs them in process; this runs them where learners' code
    # runs: the bubblewrap sandbox, Triton under its interpreter, torch from the zygote.
    ex = grading.exercises()[exercise_id]
    v = grading.grade(exercise_id, "examples", ex.solution)
    assert v.verdict == "passed", (v.message, [t["message"] for t in v.tests if not t["passed"]])

"""labs.judge.kit: loading exercise folders and grading through an executor."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from labs.judge.kit import (
    Call,
    CallResult,
    ExerciseError,
    grade,
    load_all,
    load_exercise,
    run_locally,
)

ROOT = Path(__file__).resolve().parents[3]
Q8 = ROOT / "content" / "exercises" / "q8_0-quantize"


def test_loading_reads_the_front_matter_without_running_anything():
    ex = load_exercise(Q8)
    assert ex.id == "q8_0-quantize" and ex.function == "quantize" and ex.language == "python"
    assert (
        ex.hints and ex.concepts and "def quantize" in ex.starter and "def quantize" in ex.solution
    )


def test_examples_mode_runs_only_the_examples_and_submit_runs_all():
    ex = load_exercise(Q8)
    seen: list[list[Call]] = []

    def execute(calls):
        seen.append(calls)
        return run_locally(ex.solution, calls)

    examples = grade(ex, "examples", execute)
    everything = grade(ex, "submit", execute)
    assert len(examples) == sum(c.example for c in ex.cases()) < len(everything) == len(ex.cases())
    assert all(c.function == "quantize" for c in seen[0])
    assert all(r.passed and r.detail["reference_s"] >= 0 for r in everything)
    with pytest.raises(ValueError, match="unknown mode 'all'"):
        grade(ex, "all", execute)


def test_errors_wrong_types_and_missing_results_fail_with_a_message():
    ex = load_exercise(Q8)
    results = grade(
        ex,
        "examples",
        lambda calls: [CallResult([1, 2], None, 0.01), CallResult(None, "ValueError: no", 0.0)],
    )
    assert [r.passed for r in results] == [False, False, False]
    assert results[0].message == "expected bytes, got a list"
    assert "ValueError: no" in results[1].message
    assert results[2].message.startswith("not run")


def test_learner_tracebacks_name_only_the_solution_file():
    code = "def quantize(x):\n    return 1 / 0\n"
    [result] = run_locally(code, [Call("quantize", (1,))])
    assert result.error is not None and '<solution>/solution.py", line 2' in result.error
    assert "return 1 / 0" in result.error and "local.py" not in result.error
    [missing] = run_locally("x = 1", [Call("quantize", (1,))])
    assert "defines no function named 'quantize'" in (missing.error or "")
    [unsendable] = run_locally("def quantize(x):\n    return object()", [Call("quantize", (1,))])
    assert "WireError" in (unsendable.error or "")


def test_invalid_folders_are_refused_naming_the_file(tmp_path):
    bad = tmp_path / "exercises" / "q8_0-quantize"
    shutil.copytree(Q8, bad)
    readme = bad / "README.md"
    readme.write_text(readme.read_text().replace("language: python", "language: rust"))
    with pytest.raises(ExerciseError, match=r"q8_0-quantize/README.md: language"):
        load_exercise(bad)
    readme.write_text(readme.read_text().replace("language: rust", "language: python"))
    (tmp_path / "terms").mkdir()
    with pytest.raises(ExerciseError, match="are not term cards"):
        load_all(tmp_path)
    (bad / "tests.py").unlink()
    with pytest.raises(ExerciseError, match="missing tests.py"):
        load_exercise(bad)

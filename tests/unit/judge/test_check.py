"""labs.judge.check (run by ``lowbit content check``): broken exercises are reported by file."""

from __future__ import annotations

import shutil
from pathlib import Path

from labs.judge.check import check_all

ROOT = Path(__file__).resolve().parents[3]


def _content(tmp_path: Path) -> Path:
    content = tmp_path / "content"
    (content / "terms").mkdir(parents=True)
    for slug in ("gguf", "block-quantization", "int8"):
        (content / "terms" / f"{slug}.md").write_text("---\n---\n")
    shutil.copytree(ROOT / "content/exercises/q8_0-quantize", content / "exercises/q8_0-quantize")
    return content


def test_a_valid_exercise_passes(tmp_path):
    assert check_all(_content(tmp_path)) == (1, [])


def test_a_failing_solution_a_passing_starter_and_a_bad_folder_are_reported(tmp_path):
    content = _content(tmp_path)
    ex = content / "exercises/q8_0-quantize"
    solution = (ex / "solution.py").read_text()
    (ex / "solution.py").write_text(solution.replace("codes = whole +", "codes = whole * 0 +"))
    (ex / "starter.py").write_text(solution)
    (content / "exercises/broken").mkdir()
    (content / "exercises/broken/README.md").write_text("no front matter")
    count, problems = check_all(content)
    assert count == 1
    assert any(p.startswith("broken: missing starter.py") for p in problems), problems
    assert any(p.startswith("q8_0-quantize/solution.py fails 'a ramp") for p in problems), problems
    assert "q8_0-quantize/starter.py passes every example: it gives the answer away" in problems

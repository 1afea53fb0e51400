"""``lowbit content check`` for exercises: every folder valid, every reference solution
passing every case through the wire, every starter failing (a starter that passes
teaches nothing), and every exercise with visible examples and hidden cases."""

from __future__ import annotations

from pathlib import Path

from labs.judge.kit import Exercise, ExerciseError, grade, load_exercise, run_locally


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def check_exercise(ex: Exercise) -> list[str]:
    """Problems of one loaded exercise, each naming ``<id>/<file>``."""
    try:
        cases = ex.cases()
    except Exception as e:  # noqa: BLE001 - a broken tests.py is a content problem to report
        return [f"{ex.id}/tests.py: cases() failed: {type(e).__name__}: {e}"]
    problems = []
    names = [c.name for c in cases]
    if len(set(names)) != len(names):
        problems.append(
            f"{ex.id}/tests.py: case names repeat: {sorted({n for n in names if names.count(n) > 1})}"
        )
    if not any(c.example for c in cases) or all(c.example for c in cases):
        problems.append(f"{ex.id}/tests.py: needs at least one example case and one hidden case")
    for result in grade(ex, "submit", lambda calls: run_locally(ex.solution, calls)):
        if not result.passed:
            problems.append(
                f"{ex.id}/solution.py fails '{result.name}': {_first_line(result.message)}"
            )
    starter = grade(ex, "examples", lambda calls: run_locally(ex.starter, calls))
    if all(r.passed for r in starter):
        problems.append(f"{ex.id}/starter.py passes every example: it gives the answer away")
    return problems


def check_all(content_dir: Path) -> tuple[int, list[str]]:
    """(number of exercises checked, problems) for ``content_dir/exercises``."""
    root = content_dir / "exercises"
    if not root.is_dir():
        return 0, []
    problems: list[str] = []
    count = 0
    for folder in sorted(
        p for p in root.iterdir() if p.is_dir() and not p.name.startswith(("_", "."))
    ):
        try:
            ex = load_exercise(folder)
        except ExerciseError as e:
            problems.append(str(e))
            continue
        unknown = [c for c in ex.concepts if not (content_dir / "terms" / f"{c}.md").is_file()]
        if unknown:
            problems.append(f"{ex.id}/README.md: concepts {unknown} are not term cards")
        problems += check_exercise(ex)
        count += 1
    return count, problems

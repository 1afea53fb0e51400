"""The Markdown documents (a run's report, the notebook export) rendered from
``templates/reports/``: byte for byte what the hand-built versions wrote before
the templates, so anything that reads them (a learner's notes, a diff) keeps working."""

from __future__ import annotations

from datetime import datetime
from types import SimpleNamespace as NS
from typing import Any

from app.notebook import to_markdown
from app.routes.reports import run_report

RUN = NS(
    id="abcdef0123456789",
    lab_id="memory-budget",
    status="timed_out",
    created_at=datetime(2026, 1, 2, 3, 4, 5),
    duration_s=1234.5678,
    error="boom\nbad",
    params={"model": "llama-3.1-8b", "note": "a|b"},
    result={"weights_gb": 16.06, "per": {"a": [1, 2]}},
    environment={"host": "h", "device": "cpu", "torch": "2.13.0"},
    sandbox={
        "network": {"enabled": True, "detail": "new netns"},
        "user": {"enabled": False},
        "n": 1,
    },
)
BARE = NS(
    id="0123456789abcdef",
    lab_id="torch-env",
    status="queued",
    created_at=None,
    duration_s=None,
    error=None,
    params={},
    result=None,
    environment=None,
    sandbox=None,
)
ENTRY: dict[str, Any] = {
    "prediction": "about 16 GB",
    "predicted_value": 15.0,
    "actual_value": 16.06,
    "prediction_correct": True,
    "metric": "weights_gb",
    "predicted_unit": "GB",
    "next_step": "check nvidia-smi",
    "evidence": None,
    "created_at": datetime(2026, 1, 2, 3, 4),
    "lab_id": "memory-budget",
    "source": "lab:memory-budget",
    "run_id": "abcdef0123456789",
    "predicted_choice": None,
    "actual_choice": None,
}


def test_a_run_report_with_every_section() -> None:
    assert run_report(RUN, "Memory budget", NS(**ENTRY)) == (  # type: ignore[arg-type]
        "# Memory budget — run abcdef01\n\n- **Lab:** `memory-budget`\n"
        "- **Status:** timed out\n- **Started:** 2026-01-02 03:04:05 UTC\n"
        "- **Duration:** 1.23e+03 s\n- **Error:** boom\nbad\n\n## Prediction\n\nabout 16 GB\n\n"
        "Predicted `weights_gb` = 15 GB; actual 16.06 (within 10 %).\n\n## Parameters\n\n"
        "| parameter | value |\n|---|---|\n| model | llama-3.1-8b |\n| note | a\\|b |\n\n"
        "## Result\n\n| field | value |\n|---|---|\n| weights_gb | 16.06 |\n| per.a | [1, 2] |\n\n"
        "## Environment\n\n| | |\n|---|---|\n| host | h |\n| device | cpu |\n| torch | 2.13.0 |\n\n"
        "## Sandbox\n\n| protection | in force | detail |\n|---|---|---|\n"
        "| network | yes | new netns |\n| user | NO |  |\n\n"
        "## Next step\n\ncheck nvidia-smi\n\n## Evidence kept\n\n—\n"
    )


def test_a_run_report_of_a_queued_run_with_defaults() -> None:
    assert run_report(BARE, "Torch env", None) == (  # type: ignore[arg-type]
        "# Torch env — run 01234567\n\n- **Lab:** `torch-env`\n- **Status:** queued\n\n"
        "## Parameters\n\n| parameter | value |\n|---|---|\n| (defaults) | |\n"
    )


def test_the_notebook_export() -> None:
    unrun = NS(**{**ENTRY, "predicted_value": None, "run_id": None, "lab_id": None})
    entries = [NS(**ENTRY), unrun]
    assert to_markdown(entries, {RUN.id: RUN}) == (  # type: ignore[arg-type]
        "# My lowbit notebook\n\n## 2026-01-02 03:04 UTC · memory-budget\n\n"
        "- **From:** lab:memory-budget\n- **Run:** `abcdef01` (timed_out)\n"
        "- **Parameters:** `model=llama-3.1-8b`, `note=a|b`\n"
        "- **Environment:** host: h, device: cpu, torch: 2.13.0\n"
        "- **Prediction:** about 16 GB\n"
        "- **Predicted weights_gb:** 15 GB · **actual:** 16.06 ✓ within 10 %\n"
        "- **Next diagnostic step:** check nvidia-smi\n- **Evidence kept:** —\n\n"
        "## 2026-01-02 03:04 UTC · lab:memory-budget\n\n- **From:** lab:memory-budget\n"
        "- **Prediction:** about 16 GB\n- **Next diagnostic step:** check nvidia-smi\n"
        "- **Evidence kept:** —\n"
    )
    assert to_markdown([], {}) == "# My lowbit notebook\n"


def test_a_choice_prediction_in_the_reports() -> None:
    # Issue 20 item 3: a prediction by choice is reported as what was chosen and what won.
    chosen = {
        **ENTRY,
        "predicted_value": None,
        "actual_value": None,
        "metric": "best_method",
        "predicted_choice": "awq",
        "actual_choice": "gptq",
        "prediction_correct": True,
    }
    report = run_report(RUN, "Round-to-nearest, GPTQ and AWQ", NS(**chosen))  # type: ignore[arg-type]
    assert (
        "Predicted `best_method`: awq; actual gptq (right within the noise: tied with the "
        "winner, gptq)." in report
    )
    notebook = to_markdown([NS(**{**chosen, "prediction_correct": False})], {RUN.id: RUN})  # type: ignore[arg-type]
    assert (
        "- **Predicted best_method:** awq · **actual:** gptq ✗ gptq won, clear of awq\n" in notebook
    )

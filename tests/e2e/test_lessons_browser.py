"""Issue 20.1: every embedded lab of every lesson, run in order in a real browser, ends in
its own panel with its own run and its own verdict, and no page ever holds an ``id``
twice (before, every embed rendered ``<section id="run">``: step 1's panel was replaced
by step 2's result, and step 2's panel kept polling a run that had ended)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from app.settings import ROOT
from tests.e2e.test_console_browser import DUPLICATE_IDS

pytestmark = pytest.mark.e2e

# The slowest default model-lab run on a loaded 2-core machine, with margin.
RUN_TIMEOUT_MS = 120_000
FINAL = re.compile(r"^succeeded$")

LESSONS = sorted(
    p.stem
    for p in (ROOT / "content" / "lessons").glob("*.md")
    if "```lab" in Path(p).read_text(encoding="utf-8")
)


def test_lessons_with_labs_are_found() -> None:
    assert "kv-cache-quantization" in LESSONS and "evaluating-a-quantized-model" in LESSONS
    assert len(LESSONS) >= 10


@pytest.mark.parametrize("slug", LESSONS)
def test_each_embedded_lab_runs_in_its_own_panel_with_its_own_verdict(
    page: Page, lab_stack, slug: str
) -> None:
    page.goto(f"{lab_stack.url}/lessons/{slug}")
    assert page.evaluate(DUPLICATE_IDS) == []
    embeds = page.locator(".lab-embed")
    run_ids: list[str] = []
    for i in range(embeds.count()):
        embed = embeds.nth(i)
        prefix = str(embed.get_attribute("id")) + "-"
        embed.locator(f"#{prefix}pred").fill(f"step {i + 1} of {slug}: my guess")
        embed.locator("form.lab-form button[type=submit]").click()
        panel = embed.locator(".lab-out section.run")
        expect(panel).to_have_attribute("data-status", FINAL, timeout=RUN_TIMEOUT_MS)
        verdict = panel.locator(".run-verdict .compare-box")
        expect(verdict).to_be_visible()
        expect(verdict).to_contain_text(f"step {i + 1} of {slug}")
        expect(verdict.locator("td.actual").first).not_to_contain_text("waiting for the run")
        run_ids.append(str(panel.get_attribute("id")))
        assert page.evaluate(DUPLICATE_IDS) == [], f"after step {i + 1}"
    # Every earlier panel still shows its own run, finished, with its own prediction.
    assert len(set(run_ids)) == len(run_ids)
    for i, rid in enumerate(run_ids):
        panel = embeds.nth(i).locator(".lab-out section.run")
        expect(panel).to_have_attribute("id", rid)
        expect(panel).to_have_attribute("data-status", FINAL)
        expect(panel.locator(".run-verdict")).to_contain_text(f"step {i + 1} of {slug}")
        expect(panel.locator("progress")).to_have_count(0)

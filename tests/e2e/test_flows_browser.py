"""Issue 14's learner flows in a real browser against a real server and worker: a
card link opens its lab as written, the verdict comes first and is scrolled to,
the run history follows the run, and a bad prediction stays where it was typed."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

pytestmark = pytest.mark.e2e


def test_card_link_run_verdict_first_and_history_refreshes(page: Page, lab_stack) -> None:
    page.set_viewport_size({"width": 1366, "height": 900})
    page.goto(f"{lab_stack.url}/terms/quantization-error")
    page.locator("#try a.button[href^='/labs/']").click()
    expect(page.locator("#p-format")).to_have_value("int4")
    expect(page.locator("#p-shape")).to_have_value("256, 256")
    rows_before = page.locator("#lab-history tbody tr").count()
    page.locator("#pred").fill("about 20 dB")
    page.locator("#metric").select_option("bits_per_value")
    page.locator("#pv").fill("4.25")
    page.locator("#lab-form button[type=submit]").click()
    verdict = page.locator(".run-verdict .compare-box .verdict")
    expect(verdict).to_be_visible(timeout=60_000)
    expect(page.locator(".run-verdict td.actual")).to_contain_text("Bits per value")
    expect(page.locator(".run-verdict td.actual")).not_to_contain_text("succeeded")
    expect(page.locator(".run-verdict")).to_be_in_viewport()
    box = page.locator(".run-verdict").bounding_box()
    result = page.locator("section.result h3").bounding_box()
    assert box is not None and result is not None and box["y"] < result["y"]
    expect(page.locator("#lab-history tbody tr")).to_have_count(rows_before + 1)
    expect(page.locator("#lab-history tbody tr").first).to_contain_text("format int4")


def test_a_bad_prediction_is_kept_and_marked(page: Page, lab_stack) -> None:
    page.goto(f"{lab_stack.url}/labs/block-quantize")
    page.locator("#pred").fill("few bits")
    page.locator("#pv").fill("about four")
    page.locator("#lab-form button[type=submit]").click()
    pv = page.locator("#pv")
    expect(pv).to_have_attribute("aria-invalid", "true")
    expect(pv).to_have_value("about four")
    expect(page.locator("#pred")).to_have_value("few bits")
    expect(page.locator("#pv-e")).to_contain_text("number")
    expect(page.locator("#pv-e")).to_be_in_viewport()


def test_a_lesson_lab_marks_a_bad_prediction_in_place(page: Page, lab_stack) -> None:
    page.goto(f"{lab_stack.url}/lessons/one-block-by-hand")
    embed = page.locator(".lab-embed").first
    prefix = str(embed.get_attribute("id")) + "-"
    embed.locator(f"#{prefix}pred").fill("two scales")
    embed.locator(f"#{prefix}pv").fill("lots")
    embed.locator("button[type=submit]").click()
    expect(embed.locator(".lab-out")).to_contain_text("The lab did not start")
    pv = embed.locator(f"#{prefix}pv")
    expect(pv).to_have_attribute("aria-invalid", "true")
    expect(pv).to_have_value("lots")
    expect(embed.locator(f"#{prefix}pred")).to_have_value("two scales")

"""A block-quantize run page in a real browser at desktop and phone size: the headline
tiles and the lead figure are in the first screen, figures load as images (CSP-clean,
no console errors), dark mode included. Screenshots go to docs/screenshots/ for a
reviewer to look at (``LOWBIT_SCREENSHOTS`` changes the folder)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from app.settings import ROOT
from tests.integration.conftest import wait_final

pytestmark = pytest.mark.e2e
SIZES = {"desktop": (1366, 900), "phone": (390, 844)}
PARAMS = {"format": "nvfp4", "shape": [256, 256], "distribution": "outliers", "seed": 1}


def _shots() -> Path:
    folder = Path(os.environ.get("LOWBIT_SCREENSHOTS", ROOT / "docs" / "screenshots"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder


@pytest.fixture(scope="module")
def bq_run(lab_stack) -> str:  # type: ignore[no-untyped-def]
    c = lab_stack.learner()
    r = c.post("/api/labs/block-quantize/runs", json=PARAMS)
    assert r.status_code == 202, r.text
    run = wait_final(c, r.json()["id"], timeout=120)
    assert run["status"] == "succeeded", run["error"]
    other = c.post("/api/labs/block-quantize/runs", json={**PARAMS, "format": "int4"})
    assert wait_final(c, other.json()["id"], timeout=120)["status"] == "succeeded"
    # The browser takes this learner's session so the runs are its own.
    return f"{run['id']}|{c.cookies['lowbit_session']}|{other.json()['id']}"


@pytest.mark.parametrize("size", sorted(SIZES))
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_block_quantize_run_page_reads_at_a_glance(
    browser: Browser, lab_stack, bq_run: str, size: str, scheme: str
) -> None:  # type: ignore[no-untyped-def]
    run_id, cookie, _ = bq_run.split("|")
    width, height = SIZES[size]
    context = browser.new_context(viewport={"width": width, "height": height}, color_scheme=scheme)
    context.add_cookies([{"name": "lowbit_session", "value": cookie, "url": lab_stack.url}])
    page = context.new_page()
    # This page's own parts: no CSP violation and no failed run resource (figures).
    # (Zero console errors site-wide is the browser suite's check.)
    errors: list[str] = []
    page.on(
        "console",
        lambda m: errors.append(m.text) if "Content Security Policy" in m.text else None,
    )
    page.on(
        "response",
        lambda r: (
            errors.append(f"{r.status} {r.url}") if r.status >= 400 and "/runs/" in r.url else None
        ),
    )
    page.goto(f"{lab_stack.url}/runs/{run_id}")
    tiles = page.locator(".tiles .tile")
    expect(tiles).to_have_count(5)
    expect(tiles.first).to_contain_text("4.5 bits")
    lead = page.locator(".lead-figure figure.plot img")
    expect(lead).to_be_visible()
    images = page.locator("figure.plot img")
    for i in range(images.count()):
        img = images.nth(i)
        img.scroll_into_view_if_needed()  # lazy images load once near the viewport
        expect(img).to_have_js_property("complete", True)
        assert img.evaluate("i => i.naturalWidth") > 0
    page.evaluate("window.scrollTo(0, 0)")
    # Tiles above the fold; the figure starts within the first screen and a half.
    assert tiles.first.bounding_box()["y"] < height  # type: ignore[index]
    assert lead.bounding_box()["y"] < height * 1.5  # type: ignore[index]
    # Nothing wider than the screen (phone: no sideways scroll of the whole page).
    assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
    tiles.first.locator("summary").click()
    expect(tiles.first.locator(".tile-exact")).to_be_visible()
    expect(page.locator("details.result-json")).not_to_have_attribute("open", "")
    page.screenshot(path=str(_shots() / f"run-block-quantize-{size}-{scheme}.png"), full_page=True)
    assert errors == []
    context.close()


@pytest.mark.parametrize("size", sorted(SIZES))
def test_compare_page_at_both_sizes(browser: Browser, lab_stack, bq_run: str, size: str) -> None:  # type: ignore[no-untyped-def]
    run_id, cookie, other = bq_run.split("|")
    width, height = SIZES[size]
    context = browser.new_context(viewport={"width": width, "height": height})
    context.add_cookies([{"name": "lowbit_session", "value": cookie, "url": lab_stack.url}])
    page = context.new_page()
    page.goto(f"{lab_stack.url}/runs/compare?a={run_id}&b={other}")
    expect(page.locator("table.compare-tiles tbody tr").first).to_contain_text("bits")
    # The lead pair: as images, or redrawn on one axis where its numbers are stored.
    lead = page.locator(".compare-figures:not(.compare-shared) figure.plot")
    expect(lead.locator("img, svg.chart")).to_have_count(2)
    assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
    page.screenshot(path=str(_shots() / f"compare-block-quantize-{size}.png"), full_page=True)
    context.close()


@pytest.mark.parametrize("lab", ["memory-budget", "kv-capacity", "granularity-compare"])
def test_other_curated_labs_lead_with_tiles_and_a_figure(
    browser: Browser, lab_stack, lab: str
) -> None:  # type: ignore[no-untyped-def]
    c = lab_stack.learner()
    r = c.post(f"/api/labs/{lab}/runs", json={})
    run = wait_final(c, r.json()["id"], timeout=120)
    assert run["status"] == "succeeded", run["error"]
    for size, (width, height) in SIZES.items():
        context = browser.new_context(viewport={"width": width, "height": height})
        context.add_cookies(
            [{"name": "lowbit_session", "value": c.cookies["lowbit_session"], "url": lab_stack.url}]
        )
        page = context.new_page()
        page.goto(f"{lab_stack.url}/runs/{run['id']}")
        expect(page.locator(".tiles .tile").first).to_be_visible()
        lead = page.locator(".lead-figure figure.plot img")
        lead.scroll_into_view_if_needed()
        expect(lead).to_have_js_property("complete", True)
        assert lead.evaluate("i => i.naturalWidth") > 0
        assert page.evaluate("document.documentElement.scrollWidth") <= width + 1
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(_shots() / f"run-{lab}-{size}.png"), full_page=True)
        context.close()

"""Term cards in a real browser (Debian's Chromium via Playwright): keyboard
shortcuts, in-place depth switching, search, and axe-core accessibility checks."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from app.settings import ROOT

pytestmark = pytest.mark.e2e
AXE = ROOT / "node_modules" / "axe-core" / "axe.min.js"


def test_depth_key_switches_in_place(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/terms/fp8")
    page.evaluate("window.__marker = 'same page'")
    expect(page.locator("#depth-1")).to_be_visible()
    page.keyboard.press("3")
    expect(page.locator("#depth-3")).to_be_visible()
    expect(page.locator("#depth-1")).to_be_hidden()
    assert page.evaluate("window.__marker") == "same page"  # no page load happened
    assert page.url.endswith("/terms/fp8?depth=3")
    page.keyboard.press("5")
    expect(page.locator("#depth-5")).to_be_visible()


def test_slash_search_and_follow_a_result(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/terms")
    page.keyboard.press("/")
    expect(page.locator("#site-search")).to_be_focused()
    page.keyboard.type("microscaling")
    page.keyboard.press("Enter")
    page.wait_for_url("**/search?q=microscaling")
    # live results update as you type, without a page load
    page.evaluate("window.__marker = 1")
    box = page.locator("#q")
    box.fill("kv cache")
    expect(page.locator("#results")).to_contain_text("KV cache")
    assert page.evaluate("window.__marker") == 1
    page.locator("#results a.nav-item").first.click()
    page.wait_for_url("**/terms/**")
    expect(page.locator("h1")).to_be_visible()


def test_question_mark_opens_shortcuts_and_typing_does_not_trigger(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/terms/quantization")
    page.locator("#site-search").click()
    page.keyboard.type("3?")  # typed into the field: no depth switch, no dialog
    expect(page.locator("#shortcuts")).not_to_be_visible()
    expect(page.locator("#depth-1")).to_be_visible()
    page.locator("body").click(position={"x": 5, "y": 300})
    page.keyboard.press("Escape")
    page.locator("h1").click()
    page.keyboard.press("?")
    expect(page.locator("#shortcuts")).to_be_visible()
    expect(page.locator("#shortcuts")).to_contain_text("Switch depth")
    page.keyboard.press("Escape")
    expect(page.locator("#shortcuts")).not_to_be_visible()


def test_goto_and_jk(page: Page, live_server) -> None:
    page.goto(f"{live_server.url}/terms")
    page.keyboard.press("j")
    first = page.locator("#listing a.nav-item").first
    expect(first).to_be_focused()
    page.keyboard.press("j")
    expect(page.locator("#listing a.nav-item").nth(1)).to_be_focused()
    page.keyboard.press("k")
    expect(first).to_be_focused()
    page.keyboard.press("g")
    expect(page.locator("#goto-input")).to_be_focused()
    page.keyboard.type("nvfp")
    expect(page.locator("#goto-list a").first).to_have_attribute("href", "/terms/nvfp4")
    page.keyboard.press("Enter")
    page.wait_for_url("**/terms/nvfp4")


def test_page_works_without_javascript(browser, live_server) -> None:
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto(f"{live_server.url}/terms/vram")
    page.locator("#tab-4").click()
    page.wait_for_url("**/terms/vram?depth=4*")
    expect(page.locator("#depth-4")).to_be_visible()
    ctx.close()


@pytest.mark.parametrize("path", ["/", "/terms", "/terms/block-quantization", "/search?q=scale"])
@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_no_serious_violations(browser, live_server, path: str, scheme: str) -> None:
    ctx = browser.new_context(bypass_csp=True, color_scheme=scheme)
    page = ctx.new_page()
    page.goto(f"{live_server.url}{path}")
    page.evaluate(AXE.read_text())
    result = page.evaluate("axe.run(document, {resultTypes: ['violations']})")
    bad = [
        (v["id"], v["impact"], [n["target"] for n in v["nodes"]][:3])
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]
    ctx.close()
    assert bad == [], bad


def test_phone_width_has_no_horizontal_scroll(browser, live_server) -> None:
    ctx = browser.new_context(viewport={"width": 375, "height": 800})
    page = ctx.new_page()
    page.goto(f"{live_server.url}/terms/kv-cache")
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    ctx.close()
    assert overflow <= 1


def test_a_non_number_then_the_right_one_in_a_quick_check(page: Page, live_server) -> None:
    """Issue 20.8: "abc" in a numeric quick check showed the question twice inside the
    card, logged a 422 in the console, and kept its red message after a right answer."""
    import yaml

    front = (ROOT / "content" / "terms" / "vram.md").read_text(encoding="utf-8").split("---")[1]
    item = next(q for q in yaml.safe_load(front)["quiz"] if q["type"] == "numeric")
    errors: list[str] = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.on("response", lambda r: r.status >= 400 and errors.append(f"{r.status} {r.url}"))
    page.goto(f"{live_server.url}/terms/vram?depth={item['depth']}")
    form = page.locator(f"#q-term-vram-{item['id']}")
    form.locator("input[name=answer]").fill("abc")
    form.locator("button[type=submit]").click()
    expect(form.locator(".errors")).to_contain_text("Type a number")
    expect(form.locator("input[name=answer]")).to_have_value("abc")
    card = page.locator(f"#q-term-vram-{item['id']}")
    expect(card).to_have_count(1)
    # One copy of the question: the form itself, not a feedback block around a new form.
    expect(form.locator("legend")).to_have_count(1)
    expect(page.locator(f"#fb-term-vram-{item['id']}")).to_have_count(0)
    form.locator("input[name=answer]").fill(str(item["answer"]))
    form.locator("button[type=submit]").click()
    feedback = page.locator(f"#fb-term-vram-{item['id']}")
    expect(feedback.locator(".verdict.correct")).to_be_visible()
    expect(feedback.locator(".errors")).to_have_count(0)
    expect(page.locator(f"#q-term-vram-{item['id']}")).to_have_count(0)
    assert errors == []

"""Issue 20.13: axe-core reports no serious or critical violation on any page type a
learner meets, at desktop and phone size (the run page, a lesson holding runs, compare
and a shared run included), and the phone layout keeps every navigation link and
sign-out on screen."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.screenshots import PAGES, SIZES, run_lab
from tests.e2e.test_terms_browser import AXE

pytestmark = pytest.mark.e2e

AXE_RUN = "axe.run(document, {resultTypes: ['violations']})"


def violations(page: Page) -> list[tuple[str, str, list[str]]]:
    page.evaluate(AXE.read_text())
    result = page.evaluate(AXE_RUN)
    return [
        (v["id"], v["impact"], [str(n["target"]) for n in v["nodes"]][:4])
        for v in result["violations"]
        if v["impact"] in ("serious", "critical")
    ]


@pytest.fixture(scope="module")
def pages_with_runs(browser: Browser, lab_stack) -> Iterator[tuple[Page, list[tuple[str, str]]]]:  # type: ignore[no-untyped-def]
    """One learner's browser with two finished runs of a lab, so the run, compare and
    shared pages exist; the list of (name, path) of every page type."""
    ctx = browser.new_context(bypass_csp=True)
    page = ctx.new_page()
    base = lab_stack.url
    first = run_lab(page, base).removeprefix(base)
    second = run_lab(page, base).removeprefix(base)
    page.goto(base + second)
    page.locator(".share-box button[type=submit]").click()
    shared = page.locator(".share-box input.share-link").get_attribute("value") or ""
    a, b = first.rsplit("/", 1)[1], second.rsplit("/", 1)[1]
    extra = [
        ("run", second),
        ("compare", f"/runs/compare?a={a}&b={b}"),
        ("shared", shared.removeprefix(base)),
        ("history", "/runs"),
        ("lesson-kv", "/lessons/kv-cache-quantization"),
    ]
    yield page, [*PAGES, *extra]
    ctx.close()


@pytest.mark.parametrize("size", list(SIZES))
def test_no_serious_axe_violation_on_any_page_type(pages_with_runs, lab_stack, size: str) -> None:  # type: ignore[no-untyped-def]
    page, paths = pages_with_runs
    w, h = SIZES[size]
    page.set_viewport_size({"width": w, "height": h})
    found = {}
    for name, path in paths:
        # "load": every script has run and every image is in; none of these pages swaps
        # content in after load (networkidle waited a further 0.5 s on each of ~25 pages).
        page.goto(lab_stack.url + path, wait_until="load")
        if bad := violations(page):
            found[name] = bad
    assert found == {}, "\n".join(f"{k}: {v}" for k, v in found.items())


@pytest.mark.parametrize("path", ["/", "/terms/fp8?depth=3", "/lessons"])
def test_phone_navigation_fits_and_signs_out(browser: Browser, lab_stack, path: str) -> None:
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    base = lab_stack.url
    page.goto(f"{base}{path}")
    width = page.evaluate("document.documentElement.clientWidth")
    for link in page.locator("header.site nav a").all():
        box = link.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= width, (
            link.inner_text(),
            box,
            width,
        )
    overflow = page.evaluate(
        "document.documentElement.scrollWidth - document.documentElement.clientWidth"
    )
    assert overflow <= 1
    # Signed in, sign-out is in the header of every page, not only on /account.
    page.goto(f"{base}/signup")
    name = f"phone{abs(hash(path)) % 10**6}"
    page.locator("input[name=username]").fill(name)
    page.locator("input[name=password]").fill("a long passphrase")
    page.locator("input[name=password2]").fill("a long passphrase")
    page.locator("main form button[type=submit]").click()
    page.goto(f"{base}{path}")
    signout = page.locator("header.site form[action='/signout'] button")
    expect(signout).to_be_visible()
    box = signout.bounding_box()
    assert box is not None and box["x"] + box["width"] <= width
    signout.click()
    expect(page.locator("header.site a[href='/signin']")).to_be_visible()
    ctx.close()


def test_depth_tabs_are_not_cut_on_a_phone(browser: Browser, lab_stack) -> None:
    """All five depth tabs on screen at 390 px (the row used to end in "3 Technica…"):
    the chosen one by name, the others by number, each named for screen readers."""
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    page.goto(f"{lab_stack.url}/terms/fp8?depth=3")
    width = page.evaluate("document.documentElement.clientWidth")
    tabs = page.locator('[role="tab"]')
    assert tabs.count() == 5
    for i in range(5):
        box = tabs.nth(i).bounding_box()
        assert box is not None and 0 <= box["x"] and box["x"] + box["width"] <= width, (i, box)
        expect(tabs.nth(i)).to_have_accessible_name(re.compile(r"^\d \w"))
    expect(tabs.nth(2)).to_contain_text("Technical understanding")
    ctx.close()


# The outermost element whose right edge passes the viewport, named for the failure message.
WIDEST_JS = """() => {
  const w = document.documentElement.clientWidth;
  for (const el of document.querySelectorAll('body *')) {
    const r = el.getBoundingClientRect();
    if (r.right > w + 1 && el.parentElement.getBoundingClientRect().right <= w + 1) {
      return el.tagName + '.' + el.className + ': ' + el.textContent.slice(0, 60);
    }
  }
  return '';
}"""


def test_no_card_or_lesson_is_wider_than_a_phone(browser: Browser, live_server) -> None:
    """Every term card (each depth's text, its quick checks and exercise) and every lesson
    fits 390 px: a long identifier in prose or a question breaks instead of widening the
    page (shared-memory, caching-allocator and cuda-oom did)."""
    from app.settings import ROOT

    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    page = ctx.new_page()
    wide = []
    for kind in ("terms", "lessons"):
        for path in sorted((ROOT / "content" / kind).glob("*.md")):
            page.goto(f"{live_server.url}/{kind}/{path.stem}?depth=5", wait_until="load")
            over = page.evaluate(
                "document.documentElement.scrollWidth - document.documentElement.clientWidth"
            )
            if over > 1:
                wide.append((path.stem, over, page.evaluate(WIDEST_JS)))
    ctx.close()
    assert wide == [], "\n".join(map(str, wide))

"""The exercise editor in Chromium against the real server and worker: CodeMirror
replaces the textarea without console errors or CSP violations, the keyboard can leave
it (Esc, then Tab), Run tests shows a verdict that teaches, the draft survives a
reload, axe finds nothing serious at desktop and phone size, and without JavaScript
the plain textarea submits and the result page renders."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from tests.e2e.screenshots import SIZES
from tests.e2e.test_a11y_browser import violations
from tests.e2e.test_console_browser import REPORT_CSP, Noise

pytestmark = pytest.mark.e2e

EX = "q8_0-quantize"
SHOTS = Path(os.environ.get("LOWBIT_SCREENSHOTS", "docs/screenshots"))


@pytest.fixture
def editor(browser: Browser, lab_stack) -> Iterator[tuple[Page, Noise]]:  # type: ignore[no-untyped-def]
    ctx = browser.new_context(bypass_csp=False)
    ctx.add_init_script(REPORT_CSP)
    page = ctx.new_page()
    noise = Noise(page)
    noise.where = "editor"
    page.goto(f"{lab_stack.url}/exercises/{EX}", wait_until="networkidle")
    yield page, noise
    ctx.close()


def replace_code(page: Page, code: str) -> None:
    page.locator(".cm-content").focus()
    page.keyboard.press("Control+A")
    page.keyboard.press("Delete")
    page.keyboard.insert_text(code)


def test_editor_runs_tests_and_keeps_the_draft(editor, lab_stack) -> None:  # type: ignore[no-untyped-def]
    page, noise = editor
    expect(page.locator(".cm-editor")).to_be_visible()
    expect(page.locator("textarea#code")).to_be_hidden()
    solution = (Path("content/exercises") / EX / "solution.py").read_text()
    wrong = solution.replace("/ 127", "/ 128")  # a scale one step off: every block differs
    assert wrong != solution
    replace_code(page, wrong)
    page.get_by_role("button", name="Run tests").click()
    verdict = page.locator("#result .verdict")
    expect(verdict).to_contain_text("Failed", timeout=60_000)
    expect(page.locator("#result .test.fail").first).to_be_visible()
    replace_code(page, solution)
    page.get_by_role("button", name="Run tests").click()
    expect(verdict).to_contain_text("Passed", timeout=60_000)
    page.wait_for_timeout(2000)  # the editor saves the draft 1.5 s after the last key
    page.reload(wait_until="networkidle")
    assert page.locator("textarea#code").input_value() == solution
    assert noise.items == []


def test_keyboard_can_leave_the_editor(editor) -> None:  # type: ignore[no-untyped-def]
    page, noise = editor
    page.locator(".cm-content").focus()
    page.keyboard.press("Tab")  # indents inside the editor
    expect(page.locator(".cm-content")).to_be_focused()
    page.keyboard.press("Escape")
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Run tests")).to_be_focused()
    assert noise.items == []


@pytest.mark.parametrize("size", list(SIZES))
def test_editor_and_result_pages_have_no_serious_axe_violation(
    editor, lab_stack, size: str
) -> None:  # type: ignore[no-untyped-def]
    page, noise = editor
    w, h = SIZES[size]
    page.set_viewport_size({"width": w, "height": h})
    page.reload(wait_until="networkidle")
    assert violations(page) == []
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"exercise-{size}.png"), full_page=True)
    replace_code(page, "def quantize(x):\n    print('trying')\n    return bytes(34)\n")
    page.get_by_role("button", name="Run tests").click()
    expect(page.locator("#result .verdict")).to_contain_text("Failed", timeout=60_000)
    assert violations(page) == []
    page.locator("#result").screenshot(path=str(SHOTS / f"exercise-result-{size}.png"))
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= w, f"the page is {width} px wide at {w} px"
    page.goto(f"{lab_stack.url}/exercises", wait_until="networkidle")
    assert violations(page) == []
    page.screenshot(path=str(SHOTS / f"exercises-{size}.png"), full_page=True)
    assert noise.items == []


def test_without_javascript_the_textarea_submits(browser: Browser, lab_stack) -> None:  # type: ignore[no-untyped-def]
    ctx = browser.new_context(java_script_enabled=False)
    page = ctx.new_page()
    page.goto(f"{lab_stack.url}/exercises/{EX}")
    page.locator("textarea#code").fill(
        "def quantize(x):\n    return bytes(34 * (x.numel() // 32))\n"
    )
    page.get_by_role("button", name="Run tests").click()
    expect(page).to_have_url(re.compile(r"/submissions/\w+$"))
    expect(page.locator(".verdict")).to_contain_text("Failed", timeout=60_000)
    expect(page.locator(".test.fail").first).to_contain_text("block")
    ctx.close()

"""Math in content Markdown always becomes MathML, never raw LaTeX on the page."""

from __future__ import annotations

import pytest

from app.content.markdown import render_markdown


@pytest.mark.parametrize(
    "source",
    [
        "inline $x^2$ here",
        "a paragraph\n\n$$\\frac{a}{b}$$\n\nafter",
        # display math glued to the paragraph above it (no blank line): "double inline"
        "the intensity is\n$$I = \\frac{B_M B_N}{B_M + B_N}$$\nabout 63",
        "1. **Block tile.** its intensity is\n$$I = \\frac{a}{b}$$\n   about 63",
    ],
)
def test_every_dollar_form_renders_as_mathml(source: str) -> None:
    html = render_markdown(source)
    assert "<math" in html
    assert "\\frac" not in html and "$" not in html, html

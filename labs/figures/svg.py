"""Turn matplotlib's SVG into a card figure: CSP-clean, light and dark, deterministic.

matplotlib writes every colour and font as a ``style="..."`` attribute. A page whose CSP
is ``style-src 'self'`` would block those if a browser applied it to the image, so each
declaration becomes a presentation attribute (``fill="#0b5cad"``), which no CSP governs.
Colours drawn from ``PALETTE`` also get a class, and one ``<style>`` element recolours
those classes under ``prefers-color-scheme: dark``: a browser that renders the image
without styles still shows the light figure on its own light background, never dark ink
on a dark page. No scripts, no external references, no RDF metadata, no DOCTYPE.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"

#: name -> (light, dark) colour; the light value is what the drawing code uses. Matches
#: static/css/app.css (--panel, --fg, --muted, --line, --accent, ...), so a figure sits
#: on the card like the page's own panels.
PALETTE: dict[str, tuple[str, str]] = {
    "bg": ("#ffffff", "#181c21"),
    "ink": ("#1b1d21", "#e6e8eb"),
    "muted": ("#555b66", "#a4abb6"),
    "line": ("#d9dce1", "#2d333b"),
    "blue": ("#0b5cad", "#7db7f0"),
    "orange": ("#c2410c", "#fb923c"),
    "green": ("#146c2e", "#6fd38a"),
    "purple": ("#6d28d9", "#c4b5fd"),
    "soft": ("#e6f0fa", "#1c2a3a"),
}
_BY_LIGHT = {light: name for name, (light, _) in PALETTE.items()}
FONT_FAMILY = "'DejaVu Sans', Verdana, system-ui, sans-serif"
_COLOUR_PROPS = {"fill": "f", "stroke": "s"}


def _dark_css() -> str:
    rules = []
    for name, (_, dark) in PALETTE.items():
        rules.append(f".f-{name}{{fill:{dark}}}.s-{name}{{stroke:{dark}}}")
    return "@media (prefers-color-scheme: dark){" + "".join(rules) + "}"


def _apply_style(el: ET.Element) -> None:
    """Move ``style`` declarations to attributes; tag palette colours with classes."""
    style = el.attrib.pop("style", None)
    classes = [c for c in el.get("class", "").split() if c]
    if style:
        for decl in style.split(";"):
            if ":" not in decl:
                continue
            prop, value = (p.strip() for p in decl.split(":", 1))
            if prop == "font-family":
                value = FONT_FAMILY
            el.set(prop, value)
    for prop, prefix in _COLOUR_PROPS.items():
        name = _BY_LIGHT.get(el.get(prop, "").lower())
        if name:
            classes.append(f"{prefix}-{name}")
    if classes:
        el.set("class", " ".join(dict.fromkeys(classes)))


def finish_svg(raw: str, *, title: str, attrs: dict[str, str]) -> str:
    """matplotlib's SVG text -> the committed figure (see the module docstring);
    ``attrs`` go on the root ``<svg>`` (the data fingerprint, the drawing matplotlib)."""
    ET.register_namespace("", SVG_NS)
    ET.register_namespace("xlink", XLINK_NS)
    # matplotlib's own output, never user input; the prolog and DOCTYPE are not kept.
    root = ET.fromstring(raw)  # noqa: S314
    for parent in list(root.iter()):
        for child in list(parent):
            tag = child.tag.split("}")[-1]
            if tag in ("metadata", "script", "foreignObject"):
                parent.remove(child)
            elif tag == "style":  # matplotlib's default joins: inherited attributes instead
                parent.remove(child)
    root.set("stroke-linejoin", "round")
    root.set("stroke-linecap", "butt")
    for el in root.iter():
        _apply_style(el)
        for attr in list(el.attrib):
            if attr.startswith("on"):
                del el.attrib[attr]
    root.set("role", "img")
    for name, value in attrs.items():
        root.set(name, value)
    style = ET.Element(f"{{{SVG_NS}}}style")
    style.text = _dark_css()
    title_el = ET.Element(f"{{{SVG_NS}}}title")
    title_el.text = title
    root.insert(0, style)
    root.insert(0, title_el)
    return ET.tostring(root, encoding="unicode") + "\n"


def read_root_attr(svg_text: str, name: str) -> str | None:
    """An attribute of a figure's root ``<svg>``, or None (read with a pattern, not a
    parser: the web process reads the fingerprint at every content load)."""
    m = re.search(rf'<svg\b[^>]*\s{re.escape(name)}="([^"]*)"', svg_text)
    return m.group(1) if m else None

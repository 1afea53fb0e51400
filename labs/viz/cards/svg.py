"""Turn matplotlib's SVG into a card figure: CSP-clean, light and dark, deterministic.

matplotlib writes every colour and font as a ``style="..."`` attribute. A page whose CSP
is ``style-src 'self'`` would block those if a browser applied it to the image, so each
declaration becomes a presentation attribute (``fill="#0b5cad"``), which no CSP governs.
Colours drawn from the theme's ``PALETTE`` (``labs.viz.theme``) also get a class, and one
``<style>`` element recolours the classes the figure uses under ``prefers-color-scheme:
dark``: a browser that renders the image without styles still shows the light figure on
its own light background, never dark ink on a dark page. The theme's sanitiser strips
scripts, external references, RDF metadata and the DOCTYPE.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET

from labs.viz.theme import PALETTE, sanitize_svg

SVG_NS = "http://www.w3.org/2000/svg"
XLINK_NS = "http://www.w3.org/1999/xlink"

_BY_LIGHT = {light: name for name, (light, _) in PALETTE.items()}
FONT_FAMILY = "'DejaVu Sans', Verdana, system-ui, sans-serif"
_COLOUR_PROPS = {"fill": "f", "stroke": "s"}


def _dark_css(used: set[str]) -> str:
    """Dark-scheme rules for the palette classes ``used`` (in the palette's order)."""
    rules = []
    for name, (_, dark) in PALETTE.items():
        for prop, prefix in _COLOUR_PROPS.items():
            if f"{prefix}-{name}" in used:
                rules.append(f".{prefix}-{name}{{{prop}:{dark}}}")
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
    # matplotlib's own output, never user input, through the theme's sanitiser first
    # (its <style> holds matplotlib's default joins: inherited attributes instead).
    root = ET.fromstring(sanitize_svg(raw))  # noqa: S314
    root.set("stroke-linejoin", "round")
    root.set("stroke-linecap", "butt")
    used: set[str] = set()
    for el in root.iter():
        _apply_style(el)
        used.update(el.get("class", "").split())
    root.set("role", "img")
    for name, value in attrs.items():
        root.set(name, value)
    style = ET.Element(f"{{{SVG_NS}}}style")
    style.text = _dark_css(used)
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

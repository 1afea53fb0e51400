"""Lab parameters from the web: form fields generated from the Params schema and
form parsing. Validation is ``Lab.validate`` (labs.base), the same for the web, the
CLI and the worker.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from app.middleware import json_depth_exceeds
from labs.base import Lab


@dataclass
class FormField:
    name: str
    label: str
    description: str
    kind: str  # select | number | list | text
    value: str
    options: list[str] = field(default_factory=list)
    minimum: float | None = None
    maximum: float | None = None
    step: str = "any"
    placeholder: str = ""
    error: str | None = None


# No lab parameter nests deeper than a list of lists; deeper text stays text.
MAX_FIELD_DEPTH = 8


def _loads_shallow(text: str) -> Any:
    """``json.loads`` for one field's text; ValueError for invalid JSON and for JSON
    nested deeper than MAX_FIELD_DEPTH (refused by a scan, before any recursion)."""
    if json_depth_exceeds(text.encode(), MAX_FIELD_DEPTH):
        raise ValueError("nested too deeply")
    return json.loads(text)


def _resolve(schema: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    """Follow ``$ref`` and drop the ``null`` branch of an optional field."""
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        prop = {
            **schema.get("$defs", {}).get(name, {}),
            **{k: v for k, v in prop.items() if k != "$ref"},
        }
    if "anyOf" in prop:
        branches = [b for b in prop["anyOf"] if b.get("type") != "null"]
        if len(branches) == 1:
            merged = {**prop, **_resolve(schema, branches[0])}
            merged.pop("anyOf", None)
            return merged
    return prop


def _show(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return ", ".join(_show(v) for v in value)
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        return str(int(value)) if not math.isnan(value) else "nan"
    return str(value)


def form_fields(
    lab: Lab, values: Mapping[str, Any] | None = None, errors: Mapping[str, str] | None = None
) -> list[FormField]:
    """One field per parameter, in declaration order, showing ``values`` (raw form
    text or a previous run's parameters) or else the default."""
    schema = lab.params.model_json_schema()
    out = []
    values = values or {}
    errors = errors or {}
    for name, raw_prop in schema.get("properties", {}).items():
        prop = _resolve(schema, raw_prop)
        value = values[name] if name in values else prop.get("default")
        f = FormField(
            name=name,
            label=prop.get("title") or name.replace("_", " "),
            description=prop.get("description", ""),
            kind="text",
            value=value if isinstance(value, str) else _show(value),
            error=errors.get(name),
        )
        typ = prop.get("type")
        if "enum" in prop:
            f.kind, f.options = "select", [str(o) for o in prop["enum"]]
        elif "const" in prop:
            f.kind, f.options = "select", [str(prop["const"])]
        elif typ == "boolean":
            f.kind, f.options = "select", ["true", "false"]
        elif typ in ("integer", "number"):
            f.kind = "number"
            f.minimum = prop.get("minimum", prop.get("exclusiveMinimum"))
            f.maximum = prop.get("maximum", prop.get("exclusiveMaximum"))
            f.step = "1" if typ == "integer" else "any"
        elif typ == "array":
            f.kind = "list"
            f.placeholder = "numbers separated by commas, e.g. 256, 256"
        out.append(f)
    return out


def parse_form(lab: Lab, form: Mapping[str, str]) -> dict[str, Any]:
    """Raw form text → a dict pydantic validates: empty fields take their default;
    list fields accept ``1, 2, 3`` or JSON ``[1, 2, 3]``; scalars stay text, which
    pydantic converts (and rejects with a message) per field."""
    schema = lab.params.model_json_schema()
    out: dict[str, Any] = {}
    for name, raw_prop in schema.get("properties", {}).items():
        raw = form.get(name)
        if raw is None or not str(raw).strip():
            continue
        text = str(raw).strip()
        prop = _resolve(schema, raw_prop)
        # A choice of numbers (``Literal[1, 8, 16]``) matches only the number itself.
        chosen = [o for o in prop.get("enum", ()) if not isinstance(o, str) and str(o) == text]
        if chosen:
            out[name] = chosen[0]
        elif prop.get("type") == "array":
            if text.startswith("["):
                try:
                    out[name] = _loads_shallow(text)
                except ValueError:
                    out[name] = text  # pydantic answers "should be a valid list"
            else:
                out[name] = [t for t in re.split(r"[,\s]+", text) if t]
        else:
            out[name] = text
    return out


# Query keys of GET /labs/{id} that are not lab parameters.
# Link keys that are not parameters: a run to repeat, the output a card asks to predict.
RESERVED_QUERY_KEYS = frozenset({"rerun", "predict"})
MAX_LINK_VALUE_CHARS = 4000


def _link_text(raw: str, is_list: bool) -> str:
    """A link's value as form text: JSON where it parses (``"int4"``, ``[256, 256]``,
    ``0.5``) and the plain spelling otherwise (``int4``, ``256,256``)."""
    raw = raw[:MAX_LINK_VALUE_CHARS]
    try:
        value = _loads_shallow(raw)
    except ValueError:
        return ", ".join(t for t in re.split(r"[,\s]+", raw) if t) if is_list else raw
    if isinstance(value, dict):
        return json.dumps(value)
    return value if isinstance(value, str) else _show(value)


def link_values(lab: Lab, query: list[tuple[str, str]]) -> tuple[dict[str, str], list[str]]:
    """The form text a link's ``?k=v&…`` gives each of ``lab``'s parameters, and
    messages for the rest: keys the lab does not take (ignored) and repeated keys
    (the last one wins). Values are checked later, per field, by ``Lab.validate``."""
    schema = lab.params.model_json_schema()
    props = schema.get("properties", {})
    names = set(props)
    values: dict[str, str] = {}
    notes: list[str] = []
    for key, raw in query:
        if key in RESERVED_QUERY_KEYS:
            continue
        if key not in names:
            shown = key[:60]
            notes.append(
                f"This lab has no parameter '{shown}'; the link's value for it was ignored."
            )
            continue
        if key in values:
            notes.append(f"The link gives '{key}' more than once; the last value is used.")
        values[key] = _link_text(raw, _resolve(schema, props[key]).get("type") == "array")
    return values, notes

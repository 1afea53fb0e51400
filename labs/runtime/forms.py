"""Lab parameters from the web: form fields generated from the Params schema, form
and JSON parsing, and validation errors as one message per field.

No torch here: the web process validates every request before anything is queued.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from labs.base import Lab, LabParams

FORM_ERROR_KEY = ""  # errors that belong to no single field


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
        if _resolve(schema, raw_prop).get("type") == "array":
            if text.startswith("["):
                try:
                    out[name] = json.loads(text)
                except ValueError:
                    out[name] = text  # pydantic answers "should be a valid list"
            else:
                out[name] = [t for t in re.split(r"[,\s]+", text) if t]
        else:
            out[name] = text
    return out


def field_errors(e: ValidationError) -> dict[str, str]:
    """``{field: message}``; errors of the model as a whole go under ``""``."""
    out: dict[str, list[str]] = {}
    for err in e.errors():
        loc = [p for p in err["loc"] if p not in ("body",)]
        key = str(loc[0]) if loc else FORM_ERROR_KEY
        msg = err["msg"].removeprefix("Value error, ")
        if len(loc) > 1:
            msg = f"item {'.'.join(str(int(p) + 1) if isinstance(p, int) else str(p) for p in loc[1:])}: {msg}"
        out.setdefault(key, []).append(msg)
    return {k: "; ".join(v) for k, v in out.items()}


def _unstorable(value: Any) -> str | None:
    """Why ``value`` (validated params as JSON) cannot be stored as a run's JSON on
    every database, or None: NUL characters (PostgreSQL rejects them in text and
    JSONB) and non-finite numbers (not JSON)."""
    if isinstance(value, str):
        return "must not contain NUL characters" if "\x00" in value else None
    if isinstance(value, float):
        return None if math.isfinite(value) else "must be a finite number"
    if isinstance(value, dict):
        items: Any = [*value.keys(), *value.values()]
    elif isinstance(value, list):
        items = value
    else:
        return None
    return next((why for why in map(_unstorable, items) if why), None)


def validate(lab: Lab, data: Any) -> tuple[LabParams | None, dict[str, str]]:
    """(params, {}) or (None, per-field messages)."""
    if not isinstance(data, dict):
        return None, {FORM_ERROR_KEY: "Parameters must be a JSON object of name: value."}
    try:
        params = lab.params.model_validate(data)
        stored = params.model_dump(mode="json")
        # The worker validates the stored form again: whatever that second pass would
        # reject (a cross-field check on a default that a lab's validator does not
        # run with validate_default) must fail here, with its message, not later as a
        # failed run.
        lab.params.model_validate(stored)
    except ValidationError as e:
        return None, field_errors(e)
    bad = {name: why for name, v in stored.items() if (why := _unstorable(v))}
    return (None, bad) if bad else (params, {})

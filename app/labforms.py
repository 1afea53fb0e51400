"""HTML form fields generated from a lab's pydantic Params (no torch needed)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from labs.base import Lab


@dataclass
class Field:
    name: str
    label: str
    help: str
    kind: str  # number | integer | select | text | json | checkbox
    value: str
    minimum: float | None = None
    maximum: float | None = None
    options: tuple[str, ...] = ()
    required: bool = False


def _resolve(schema: dict[str, Any], prop: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in prop:
        name = prop["$ref"].rsplit("/", 1)[-1]
        return {**schema.get("$defs", {}).get(name, {}), **{k: v for k, v in prop.items() if k != "$ref"}}
    if "anyOf" in prop:  # Optional[X]: use X
        non_null = [p for p in prop["anyOf"] if p.get("type") != "null"]
        if len(non_null) == 1:
            return {**_resolve(schema, non_null[0]), **{k: v for k, v in prop.items() if k != "anyOf"}}
    return prop


def form_fields(lab: Lab, values: dict[str, Any] | None = None) -> list[Field]:
    """One field per parameter, pre-filled from ``values`` over the defaults."""
    schema = lab.params.model_json_schema()
    values = values or {}
    out = []
    for name, raw in schema.get("properties", {}).items():
        prop = _resolve(schema, raw)
        current = values.get(name, prop.get("default"))
        label = prop.get("title") or name.replace("_", " ")
        help_ = prop.get("description", "")
        typ = prop.get("type")
        if "enum" in prop:
            kind, options = "select", tuple(str(o) for o in prop["enum"])
        elif typ == "boolean":
            kind, options = "checkbox", ()
        elif typ in ("integer", "number"):
            kind, options = typ, ()
        elif typ == "string":
            kind, options = "text", ()
        else:
            kind, options = "json", ()
        if kind == "json":
            value = "" if current is None else json.dumps(current)
        elif kind == "checkbox":
            value = "true" if current else ""
        else:
            value = "" if current is None else str(current)
        out.append(Field(
            name=name, label=str(label), help=str(help_), kind=kind, value=value,
            minimum=prop.get("minimum", prop.get("exclusiveMinimum")),
            maximum=prop.get("maximum", prop.get("exclusiveMaximum")),
            options=options, required=name in schema.get("required", []),
        ))
    return out


def parse_form(lab: Lab, form: dict[str, str]) -> dict[str, Any]:
    """Turn submitted strings back into JSON values; pydantic validates them after."""
    out: dict[str, Any] = {}
    for f in form_fields(lab):
        if f.kind == "checkbox":
            out[f.name] = f.name in form and form[f.name] not in ("", "false", "off")
            continue
        if f.name not in form:
            continue
        raw = form[f.name].strip()
        if raw == "":
            continue  # the default applies
        if f.kind == "json":
            try:
                out[f.name] = json.loads(raw)
            except json.JSONDecodeError:
                out[f.name] = raw  # pydantic reports the type error for this field
        else:
            out[f.name] = raw
    return out

"""The generated lab form (fields from the Params schema, form text parsed, then
``Lab.validate``) and the run-page helpers."""

from __future__ import annotations

from app.runs import forms
from app.runs.views import diff, format_value, sse
from labs import block_quantize
from tests.unit.labs.helpers import validate

BQ = block_quantize.LAB


def test_form_fields_come_from_the_params_schema() -> None:
    fields = {f.name: f for f in forms.form_fields(BQ)}
    assert list(fields) == ["format", "shape", "distribution", "values", "seed"]
    assert fields["format"].kind == "select" and fields["format"].value == "nvfp4"
    assert set(fields["format"].options) == set(block_quantize.FORMAT_KEYS)
    assert fields["shape"].kind == "list" and fields["values"].kind == "list"
    assert (
        fields["seed"].kind == "number"
        and fields["seed"].minimum == 0
        and fields["seed"].step == "1"
    )
    assert all(f.description for f in fields.values())
    again = {f.name: f.value for f in forms.form_fields(BQ, {"shape": [16, 64], "format": "q4_0"})}
    assert again["shape"] == "16, 64" and again["format"] == "q4_0"


def test_form_text_is_parsed_and_validated_per_field() -> None:
    data = forms.parse_form(
        BQ,
        {
            "format": "mxfp4",
            "shape": "8, 64",
            "distribution": "normal",
            "values": "",
            "seed": "7",
            "csrf_token": "x",
        },
    )
    assert data == {"format": "mxfp4", "shape": ["8", "64"], "distribution": "normal", "seed": "7"}
    params, errors = validate(BQ, data)
    assert errors == {} and params is not None and params.dims == (8, 64)
    _, errors = validate(
        BQ,
        forms.parse_form(
            BQ, {"shape": "[0, 5]", "seed": "-1", "distribution": "custom", "values": "1, nan"}
        ),
    )
    assert set(errors) == {"shape", "seed", "values"}
    assert validate(BQ, [1, 2])[1] == {"": "Parameters must be a JSON object of name: value."}


def test_view_helpers() -> None:
    assert (
        format_value(0.000123456) == "1.23456×10⁻⁴"
        and format_value(12345) == "12,345"
        and format_value(None) == "—"
    )
    assert format_value(list(range(40))).endswith("… (40 values)")  # no Python brackets
    assert not format_value(list(range(40))).startswith("[")
    rows = {
        r.key: r for r in diff({"a": 1, "m": {"x": 1.5}}, {"a": 1, "m": {"x": 2.5}, "new": True})
    }
    assert rows["a"].same and not rows["m.x"].same and rows["new"].a is None
    assert (
        sse("log", "<p>a</p>\n<p>b</p>", 7)
        == "id: 7\nevent: log\ndata: <p>a</p>\ndata: <p>b</p>\n\n"
    )

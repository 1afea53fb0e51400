"""Hypothesis fuzzing of the two places untrusted structure comes in: the content
loader (any file an author writes) and lab parameter validation (any JSON or form
a learner sends). Neither may raise anything but its own error type, and what
validation accepts must be storable and survive the worker's re-validation."""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.content import ContentError, load_catalogue
from app.runs import forms
from app.runs.catalog import lab_catalogue
from app.settings import Settings
from tests.conftest import TEST_LAB_MODULES
from tests.factories import card_front, make_content
from tests.unit.labs.helpers import validate

LABS = lab_catalogue(Settings(env="test", extra_lab_modules=TEST_LAB_MODULES))
FUZZ = settings(
    max_examples=50,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=40)
    | st.text(max_size=8).map(lambda t: t + "\x00")
    | st.sampled_from(["", "nvfp4", "q4_0", "normal", "custom", "llama-3.1-8b", "\x00", "1e309"])
)
json_values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=10), inner, max_size=5)
    ),
    max_leaves=20,
)


def lab_data(lab_id: str) -> st.SearchStrategy[dict[str, Any]]:
    """One hostile value in an otherwise default request (so it reaches the field's
    own checks), or any values over the lab's parameter names and a stray one."""
    names = sorted(LABS[lab_id].params.model_json_schema().get("properties", {}))
    keys = st.sampled_from([*names, "bogus"])
    one = st.tuples(keys, json_values).map(lambda kv: {kv[0]: kv[1]})
    return one | st.dictionaries(keys, json_values, max_size=len(names) + 1)


def check(lab_id: str, data: Any) -> None:
    lab = LABS[lab_id]
    params, errors = validate(lab, data)
    if params is None:
        assert errors and all(isinstance(k, str) and v for k, v in errors.items()), errors
        return
    assert errors == {}
    stored = params.model_dump(mode="json")
    # Stored as a run's JSON (PostgreSQL JSONB: no NaN, no NUL) ...
    text = json.dumps(stored, allow_nan=False)
    assert "\\u0000" not in text
    # ... and validated again by the worker from what was stored.
    assert lab.params.model_validate(json.loads(text)) == params


# Values that break storage or arithmetic when a validator lets them through.
HOSTILE: list[Any] = [
    "\x00",
    "a\x00b",
    "",
    "x" * 5000,
    "nan",
    "1e309",
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    -1,
    0,
    2**31,
    2**63,
    -(2**63),
    10**30,
    True,
    None,
    [],
    {},
    [math.nan],
    ["\x00"],
    {"\x00": 1},
]


@pytest.mark.parametrize("lab_id", sorted(LABS))
def test_every_field_of_every_lab_refuses_each_hostile_value_cleanly(lab_id: str) -> None:
    names = sorted(LABS[lab_id].params.model_json_schema().get("properties", {}))
    for name in names:
        for value in HOSTILE:
            check(lab_id, {name: value})
            check(lab_id, {name: [value, value]})


@pytest.mark.parametrize("lab_id", sorted(LABS))
@FUZZ
@given(data=st.data())
def test_lab_params_validation_never_raises_and_accepts_only_storable_values(
    lab_id: str, data: st.DataObject
) -> None:
    check(lab_id, data.draw(lab_data(lab_id) | json_values))


@pytest.mark.parametrize("lab_id", sorted(LABS))
@FUZZ
@given(data=st.data())
def test_lab_form_text_never_raises(lab_id: str, data: st.DataObject) -> None:
    names = sorted(LABS[lab_id].params.model_json_schema().get("properties", {}))
    form = data.draw(st.dictionaries(st.sampled_from(names or ["x"]), st.text(max_size=60)))
    check(lab_id, forms.parse_form(LABS[lab_id], form))


def load(tree: Path) -> None:
    """Loads, or raises ContentError whose problems each name a file and a line."""
    try:
        load_catalogue(tree, lab_ids=set(LABS))
    except ContentError as e:
        assert e.problems
        for p in e.problems:
            assert p.path and p.line >= 0 and p.message, p


FRONT_KEYS = sorted(card_front("alpha", []))


@FUZZ
@given(text=st.text(max_size=400) | st.binary(max_size=200).map(lambda b: b.decode("latin-1")))
def test_any_text_as_a_card_file_is_loaded_or_reported(text: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        tree = make_content(Path(d))
        (tree / "terms" / "alpha.md").write_text(text, encoding="utf-8")
        load(tree)


@FUZZ
@given(
    key=st.sampled_from([*FRONT_KEYS, "extra"]),
    value=json_values.filter(lambda v: not (isinstance(v, float) and math.isnan(v))),
    body=st.none() | st.text(max_size=300),
)
def test_any_front_matter_value_or_body_is_loaded_or_reported(
    key: str, value: Any, body: str | None
) -> None:
    with tempfile.TemporaryDirectory() as d:
        tree = make_content(Path(d))
        front = card_front("alpha", ["beta", "gamma"])
        front[key] = value
        path = tree / "terms" / "alpha.md"
        original = path.read_text(encoding="utf-8")
        rest = original.split("\n---\n", 1)[1] if body is None else body
        path.write_text("---\n" + yaml.safe_dump(front) + "---\n" + rest, encoding="utf-8")
        load(tree)


@FUZZ
@given(
    quiz=st.lists(
        st.dictionaries(
            st.sampled_from(
                [
                    "id",
                    "type",
                    "prompt",
                    "choices",
                    "answer",
                    "explanation",
                    "depth",
                    "unit",
                    "tolerance",
                    "order",
                ]
            ),
            json_values,
            max_size=8,
        ),
        max_size=3,
    )
)
def test_any_quiz_block_is_loaded_or_reported(quiz: list[dict[str, Any]]) -> None:
    with tempfile.TemporaryDirectory() as d:
        tree = make_content(Path(d))
        front = card_front("alpha", ["beta", "gamma"], quiz=quiz)
        path = tree / "terms" / "alpha.md"
        body = path.read_text(encoding="utf-8").split("\n---\n", 1)[1]
        path.write_text("---\n" + yaml.safe_dump(front) + "---\n" + body, encoding="utf-8")
        load(tree)

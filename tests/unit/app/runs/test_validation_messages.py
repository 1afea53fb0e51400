"""Issue 20.12: a refused lab parameter is answered with a sentence a learner can act on,
beside its field (the API's per-field 422 and the lab form alike), never pydantic's own
wording ("item literal['default','tensor','channel']: Input should be …", "List should
have at most 2 items after validation, not 3")."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from tests.conftest import csrf_headers

PYDANTIC_WORDING = ("Input should", "after validation", "item literal", "Extra inputs", "[")

CASES = [
    ("block-quantize", {"shape": [1, 2, 3]}, "shape", "It must have at most 2 items (got 3)."),
    ("block-quantize", {"seed": -1}, "seed", "It must be at least 0 (got -1)."),
    (
        "block-quantize",
        {"distribution": "custom", "values": [1, "a"]},
        "values",
        "Item 2 must be a number (got 'a').",
    ),
    (
        "model-quality",
        {"granularity": "foo"},
        "granularity",
        "It must be one of 'default', 'tensor' or 'channel', or be a whole number (got 'foo').",
    ),
    ("quant-algorithms", {"methods": ["rtn", "gptq", "awq", "rtn"]}, "methods", "at most 3"),
    ("memory-budget", {"tensor_parallel": 3.5}, "tensor_parallel", "a whole number (got 3.5)"),
    ("memory-budget", {"bogus": 1}, "bogus", "This lab has no parameter of that name"),
]


@pytest.mark.parametrize(("lab", "params", "field", "message"), CASES)
def test_the_api_answers_each_field_with_a_sentence(client, lab, params, field, message) -> None:
    r = client.post(f"/api/labs/{lab}/runs", json=params, headers=csrf_headers(client))
    assert r.status_code == 422
    got = {d["field"]: d["message"] for d in r.json()["detail"]}
    assert message in got[field], got
    text = got[field]
    assert text[0].isupper() and text.endswith(".")
    if field != "values":  # a list's own message may quote a list value
        assert not any(w in text for w in PYDANTIC_WORDING), text


def test_the_lab_form_shows_the_sentence_beside_its_field(client) -> None:
    h = csrf_headers(client)
    r = client.post(
        "/labs/block-quantize/runs",
        data={"csrf_token": h["X-CSRF-Token"], "seed": "-1"},
        headers={"HX-Request": "true"},
    )
    doc = BeautifulSoup(r.text, "html.parser")
    assert doc.select_one("#p-seed-e").get_text(strip=True) == "It must be at least 0 (got -1)."

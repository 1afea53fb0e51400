"""``Lab.validate``: the one validator of the web, the CLI and the worker, with one
error format (``InvalidParams.errors``: a message per parameter)."""

from __future__ import annotations

import pytest

from labs import block_quantize
from labs.base import NOT_AN_OBJECT, WHOLE_REQUEST, InvalidParams
from labs.runtime.probe import PROBES

BQ = block_quantize.LAB


def errors(lab, data) -> dict[str, str]:  # type: ignore[no-untyped-def]
    with pytest.raises(InvalidParams) as e:
        lab.validate(data)
    return e.value.errors


def test_defaults_and_the_stored_form_validate() -> None:
    params = BQ.validate({})
    assert BQ.validate(params.model_dump(mode="json")) == params  # what the worker re-reads


def test_one_message_per_parameter_and_one_line_for_the_worker() -> None:
    bad = errors(BQ, {"shape": [0, 5], "format": "fp3", "bogus": 1})
    assert set(bad) == {"shape", "format", "bogus"} and all(bad.values())
    with pytest.raises(InvalidParams) as e:
        BQ.validate({"format": "fp3"})
    assert str(e.value) == f"format: {e.value.errors['format']}"
    assert errors(BQ, [1, 2]) == {WHOLE_REQUEST: NOT_AN_OBJECT}
    with pytest.raises(InvalidParams, match="^params: "):
        BQ.validate("x")


def test_values_no_database_can_store_are_refused() -> None:
    assert errors(PROBES[0], {"target": "a\x00b"}) == {"target": "must not contain NUL characters"}

"""labs.judge.wire: every value the learner may return round-trips; bad data is refused."""

from __future__ import annotations

import base64
import json
import math

import pytest
import torch

from labs.judge import wire
from labs.judge.wire import WireError, decode, encode

LIMIT = 1 << 20


def roundtrip(value):
    return decode(encode(value), LIMIT)


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        False,
        0,
        -7,
        2**80,
        1.5,
        -0.0,
        "naïve ✓",
        b"",
        b"\x00\xff" * 10,
        [],
        [1, [2, [3]]],
        (),
        (1, "a"),
    ],
)
def test_plain_values_round_trip_with_their_types(value):
    back = roundtrip(value)
    assert back == value and type(back) is type(value)


def test_nested_containers_keep_tuples_dicts_and_bytes():
    value = {"codes": (b"\x01", [1.0, None]), "$bytes": "not a tag", "n": {"x": True}}
    back = roundtrip(value)
    assert back == value
    assert isinstance(back["codes"], tuple) and isinstance(back["codes"][0], bytes)
    assert back["$bytes"] == "not a tag"  # a learner's key never passes for a tag


def test_special_floats_are_tagged_and_come_back():
    back = roundtrip([math.inf, -math.inf, math.nan])
    assert back[0] == math.inf and back[1] == -math.inf and math.isnan(back[2])
    assert b"NaN" not in encode(math.nan) and b"Infinity" not in encode(math.inf)


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float32,
        torch.float16,
        torch.bfloat16,
        torch.float64,
        torch.int8,
        torch.uint8,
        torch.int32,
        torch.int64,
        torch.bool,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
    ],
)
def test_tensors_round_trip_bit_for_bit(dtype):
    g = torch.Generator().manual_seed(0)
    t = (torch.randn(3, 5, generator=g) * 100).to(dtype)
    back = roundtrip(t)
    assert back.dtype == dtype and back.shape == t.shape
    assert torch.equal(back.view(-1).view(torch.uint8), t.view(-1).view(torch.uint8))


def test_tensor_edge_shapes_views_and_grad():
    assert roundtrip(torch.tensor(2.5)).item() == 2.5
    assert roundtrip(torch.empty(0, 4)).shape == (0, 4)
    t = torch.arange(12.0).reshape(3, 4).t()  # not contiguous
    assert torch.equal(roundtrip(t), t)
    assert torch.equal(roundtrip(torch.ones(2, requires_grad=True)), torch.ones(2))
    expanded = torch.tensor(3.0).expand(1).clone()  # stride 0 on a size-1 dim
    assert torch.equal(roundtrip(expanded), torch.tensor([3.0]))
    assert torch.equal(
        roundtrip(torch.tensor([1.0, 2.0]).expand(3, 2)), torch.tensor([[1.0, 2.0]] * 3)
    )


def test_tensor_bytes_are_little_endian_row_major():
    doc = json.loads(encode(torch.tensor([1.0], dtype=torch.float16)))
    assert base64.b64decode(doc["value"]["$tensor"]["data"]) == b"\x00\x3c"


@pytest.mark.parametrize(
    ("value", "says"),
    [
        (object(), "a object cannot be returned"),
        ({1: 2}, "keys must be strings"),
        (torch.zeros(2, dtype=torch.complex64), "dtype complex64"),
        ({1.5}, "a set cannot"),
    ],
)
def test_encode_refuses_what_it_cannot_carry(value, says):
    with pytest.raises(WireError, match=says):
        encode(value)


def test_encode_refuses_deep_nesting():
    deep: list = []
    for _ in range(wire.MAX_DEPTH + 5):
        deep = [deep]
    with pytest.raises(WireError, match="nested too deeply"):
        encode(deep)


def doc(value) -> bytes:
    return json.dumps({"wire": 1, "value": value}).encode()


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"x" * 101, "over the limit of 100"),
        (b"{not json", "not a valid encoding"),
        (b"\xff\xfe", "not a valid encoding"),
        (b"[1, 2]", "expected {'wire'"),
        (json.dumps({"wire": 2, "value": 1}).encode(), "wire version 2"),
        (b'{"wire": 1, "value": NaN}', "bare NaN"),
        (doc({"a": 1}), "unknown tag 'a'"),
        (doc({"$bytes": "", "$tuple": []}), "not a tagged value"),
        (doc({"$pickle": "gASVAAAA"}), "unknown tag"),
        (doc({"$bytes": "***"}), "bad base64"),
        (doc({"$float": "1e9"}), "malformed"),
        (
            doc({"$tensor": {"dtype": "load", "shape": [1], "data": ""}}),
            "dtype 'load' is not allowed",
        ),
        (
            doc({"$tensor": {"dtype": "float32", "shape": [3], "data": "AAAA"}}),
            "needs 12 bytes, not 3",
        ),
        (doc({"$tensor": {"dtype": "float32", "shape": [-1], "data": ""}}), "shape"),
        (doc({"$tensor": {"dtype": "float32", "shape": [1] * 9, "data": "AAAAAA=="}}), "shape"),
        (doc({"$tensor": {"dtype": "bool", "shape": [1], "data": "Ag=="}}), "other than 0 and 1"),
        (doc({"$tensor": {"dtype": "float32", "shape": [1]}}), "exactly dtype, shape and data"),
        (b'{"wire": 1, "value": ' + b"[" * 100000 + b"]" * 100000 + b"}", "nested too deeply"),
        (doc(json.loads("[" * 70 + "]" * 70)), "nested too deeply"),
        (b'{"wire": 1, "value": ' + b"9" * 5000 + b"}", "not a valid encoding"),
    ],
)
def test_decode_refuses_malformed_or_oversize_data_with_a_clear_message(data, says):
    limit = 100 if says.startswith("over") else 10 << 20
    with pytest.raises(WireError, match=says):
        decode(data, limit)
    assert issubclass(WireError, ValueError)

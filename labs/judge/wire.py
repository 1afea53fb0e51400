"""The encoding of values that cross the judge's sandbox boundary: JSON, never pickle.

Learner code runs in the sandbox; what it returns is read by trusted grading code
outside. Unpickling would run whatever the learner chose, so values travel as JSON with
a few tagged objects:

    None, bool, int, str, list     JSON as is; floats too, except NaN and ±inf
    {"$float": "nan" | "inf" | "-inf"}
    {"$tuple": [...]}
    {"$dict": {"key": ...}}        keys must be strings
    {"$bytes": "<base64>"}
    {"$tensor": {"dtype": "float32", "shape": [2, 3], "data": "<base64>"}}
                                   raw element bytes, little-endian, row-major

A plain JSON object is never a value (dicts are always tagged), so a learner's dict with
a key such as ``"$bytes"`` cannot pass for bytes. ``decode`` refuses, with a ValueError
that says why, anything over its size limit, nested deeper than ``MAX_DEPTH``, not
valid JSON, with an unknown tag or dtype, or a tensor whose shape does not match its
bytes.

This module is copied into the sandbox beside the runner, so it imports only the
standard library, and torch only when a tensor is encoded or decoded.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import sys
from typing import Any

WIRE_VERSION = 1
MAX_DEPTH = 64  # lists, tuples and dicts inside each other
MAX_DIMS = 8  # dimensions of one tensor
_DTYPES = (
    "float64",
    "float32",
    "float16",
    "bfloat16",
    "float8_e4m3fn",
    "float8_e5m2",
    "int64",
    "int32",
    "int16",
    "int8",
    "uint8",
    "bool",
)
_SPECIAL_FLOATS = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf}


class WireError(ValueError):
    """A value that cannot be encoded, or data that is not a valid encoding."""


def encode(value: Any) -> bytes:
    """The value as UTF-8 JSON bytes; WireError for a type the wire does not carry."""
    return json.dumps({"wire": WIRE_VERSION, "value": _enc(value, 0)}, allow_nan=False).encode()


def decode(data: bytes, limit: int) -> Any:
    """The value ``encode`` wrote; WireError if ``data`` is over ``limit`` bytes or invalid."""
    if len(data) > limit:
        raise WireError(f"the encoded value is {len(data):,} bytes, over the limit of {limit:,}")
    try:
        doc = json.loads(data, parse_constant=_refuse_constant)
    except WireError:
        raise
    except RecursionError:
        raise WireError(
            f"the value is nested too deeply (the limit is {MAX_DEPTH} levels)"
        ) from None
    except ValueError as e:  # bad JSON or UTF-8, an int of over 4300 digits
        raise WireError(f"not a valid encoding: {e}") from None
    if not isinstance(doc, dict) or set(doc) != {"wire", "value"}:
        raise WireError("not a valid encoding: expected {'wire': version, 'value': ...}")
    if doc["wire"] != WIRE_VERSION:
        raise WireError(f"wire version {doc['wire']!r} is not {WIRE_VERSION}")
    return _dec(doc["value"], 0)


def _refuse_constant(name: str) -> Any:
    raise WireError(f"not a valid encoding: bare {name} (floats like it are tagged)")


def _type_name(v: Any) -> str:
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _enc(v: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"the value is nested too deeply (the limit is {MAX_DEPTH} levels)")
    if v is None or isinstance(v, bool):
        return v
    if isinstance(v, int):
        return int(v)
    if isinstance(v, float):
        return (
            float(v)
            if math.isfinite(v)
            else {"$float": "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")}
        )
    if isinstance(v, str):
        return str(v)
    if isinstance(v, bytes | bytearray | memoryview):
        return {"$bytes": base64.b64encode(bytes(v)).decode("ascii")}
    if isinstance(v, list):
        return [_enc(x, depth + 1) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x, depth + 1) for x in v]}
    if isinstance(v, dict):
        bad = next((k for k in v if not isinstance(k, str)), None)
        if bad is not None:
            raise WireError(f"dictionary keys must be strings, not {_type_name(bad)} ({bad!r:.40})")
        return {"$dict": {str(k): _enc(x, depth + 1) for k, x in v.items()}}
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(v, torch.Tensor):
        return {"$tensor": _enc_tensor(torch, v)}
    raise WireError(
        f"a {_type_name(v)} cannot be returned: use a torch.Tensor, bytes, int, float, str, "
        "bool, None, or a list, tuple or dict of them"
    )


def _enc_tensor(torch: Any, t: Any) -> dict[str, Any]:
    dtype = str(t.dtype).removeprefix("torch.")
    if dtype not in _DTYPES:
        raise WireError(
            f"a tensor of dtype {dtype} cannot be returned (allowed: {', '.join(_DTYPES)})"
        )
    if t.layout != torch.strided or t.is_quantized:
        raise WireError("only dense tensors can be returned (not sparse or quantized ones)")
    # A fresh buffer: views, expanded (stride 0) and size-1 dims all become plain bytes.
    flat = torch.empty(t.numel(), dtype=t.dtype).copy_(t.detach().reshape(-1))
    raw = flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)
    if sys.byteorder != "little" and flat.element_size() > 1:
        raw = raw.reshape(-1, flat.element_size()).flip(1).reshape(-1)
    data = base64.b64encode(raw.numpy().tobytes()).decode("ascii")
    return {"dtype": dtype, "shape": [int(n) for n in t.shape], "data": data}


def _dec(v: Any, depth: int) -> Any:
    if depth > MAX_DEPTH:
        raise WireError(f"the value is nested too deeply (the limit is {MAX_DEPTH} levels)")
    if isinstance(v, list):
        return [_dec(x, depth + 1) for x in v]
    if not isinstance(v, dict):
        return v  # None, bool, int, float, str: json.loads makes nothing else
    if len(v) != 1:
        raise WireError(
            f"not a valid encoding: an object with keys {sorted(v)[:4]} is not a tagged value"
        )
    ((tag, body),) = v.items()
    if tag == "$float" and body in _SPECIAL_FLOATS:
        return _SPECIAL_FLOATS[body]
    if tag == "$tuple" and isinstance(body, list):
        return tuple(_dec(x, depth + 1) for x in body)
    if tag == "$dict" and isinstance(body, dict):
        return {k: _dec(x, depth + 1) for k, x in body.items()}
    if tag == "$bytes" and isinstance(body, str):
        return _b64(body)
    if tag == "$tensor" and isinstance(body, dict):
        return _dec_tensor(body)
    raise WireError(
        f"not a valid encoding: unknown tag {tag!r:.40} or a malformed {tag!r:.40} value"
    )


def _b64(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise WireError("not a valid encoding: bad base64 data") from None


def _dec_tensor(body: dict[str, Any]) -> Any:
    if set(body) != {"dtype", "shape", "data"} or not isinstance(body["data"], str):
        raise WireError("not a valid encoding: a tensor needs exactly dtype, shape and data")
    dtype_name, shape = body["dtype"], body["shape"]
    if dtype_name not in _DTYPES:
        raise WireError(f"not a valid encoding: tensor dtype {dtype_name!r:.40} is not allowed")
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_DIMS
        or not all(type(n) is int and 0 <= n < 2**40 for n in shape)
    ):
        raise WireError(
            f"not a valid encoding: a tensor shape is a list of at most {MAX_DIMS} sizes ≥ 0"
        )
    import torch

    dtype = getattr(torch, dtype_name)
    raw = bytearray(_b64(body["data"]))
    itemsize = torch.empty(0, dtype=dtype).element_size()
    numel = math.prod(shape)
    if numel * itemsize != len(raw):
        raise WireError(
            f"not a valid encoding: a {dtype_name} tensor of shape {shape} needs "
            f"{numel * itemsize} bytes, not {len(raw)}"
        )
    if not raw:
        return torch.empty(shape, dtype=dtype)
    flat = torch.frombuffer(raw, dtype=torch.uint8)
    if dtype == torch.bool and bool((flat > 1).any()):
        raise WireError("not a valid encoding: a bool tensor holds bytes other than 0 and 1")
    if sys.byteorder != "little" and itemsize > 1:
        flat = flat.reshape(-1, itemsize).flip(1).reshape(-1)
    return flat.view(dtype).reshape(shape).clone()

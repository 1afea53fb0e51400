"""A safe encoding for values crossing the sandbox boundary (never pickle).

Placeholder until the exercises branch lands its ``wire``: JSON with tagged
objects for bytes, tuples and tensors (dtype, shape, raw little-endian bytes).
"""

from __future__ import annotations

import base64
import json
from typing import Any


class WireError(ValueError):
    pass


def _enc(v: Any) -> Any:
    if v is None or isinstance(v, bool | int | float | str):
        return v
    if isinstance(v, bytes | bytearray):
        return {"$bytes": base64.b64encode(bytes(v)).decode()}
    if isinstance(v, list):
        return [_enc(x) for x in v]
    if isinstance(v, tuple):
        return {"$tuple": [_enc(x) for x in v]}
    if isinstance(v, dict):
        if not all(isinstance(k, str) for k in v):
            raise WireError("dictionary keys must be strings")
        return {"$dict": {k: _enc(x) for k, x in v.items()}}
    if type(v).__module__ == "torch" and type(v).__name__ == "Tensor":
        t = v.detach().cpu().contiguous()
        raw = t.view(-1).view(__import__("torch").uint8).numpy().tobytes() if t.numel() else b""
        return {
            "$tensor": {
                "dtype": str(t.dtype).removeprefix("torch."),
                "shape": list(t.shape),
                "data": base64.b64encode(raw).decode(),
            }
        }
    raise WireError(f"a {type(v).__name__} cannot cross the sandbox boundary")


def _dec(v: Any) -> Any:
    if isinstance(v, list):
        return [_dec(x) for x in v]
    if not isinstance(v, dict):
        return v
    if "$bytes" in v:
        return base64.b64decode(v["$bytes"])
    if "$tuple" in v:
        return tuple(_dec(x) for x in v["$tuple"])
    if "$dict" in v:
        return {k: _dec(x) for k, x in v["$dict"].items()}
    if "$tensor" in v:
        import torch

        spec = v["$tensor"]
        dtype = getattr(torch, spec["dtype"], None)
        if not isinstance(dtype, torch.dtype):
            raise WireError(f"unknown dtype {spec['dtype']!r}")
        raw = bytearray(base64.b64decode(spec["data"]))
        flat = (
            torch.frombuffer(raw, dtype=torch.uint8) if raw else torch.empty(0, dtype=torch.uint8)
        )
        return flat.view(dtype).reshape(spec["shape"]).clone()
    raise WireError("unknown tagged object")


def encode(value: Any) -> bytes:
    return json.dumps(_enc(value)).encode()


def decode(data: bytes, limit: int) -> Any:
    if len(data) > limit:
        raise WireError(f"{len(data)} bytes is over the limit of {limit}")
    try:
        return _dec(json.loads(data))
    except (ValueError, KeyError, TypeError, RuntimeError) as e:
        raise WireError(str(e)) from None

"""Fake quantization of the KV cache inside ``transformers``' attention.

Registers an attention implementation (``transformers.AttentionInterface``) that
quantizes keys and values exactly where a KV cache stores them — keys after
RoPE, per KV head, before grouped-query heads are repeated — then runs the
usual scaled-dot-product attention on the dequantized values.

Granularities (one scale per …):
- ``per-tensor``: the whole K (or V) of a window, all heads;
- ``per-head``: one KV head over the window;
- ``per-token``: one token of one head (its ``head_dim`` values; block formats
  cut that row into their own blocks);
- ``kivi``: keys per channel (one channel of one head across a group of
  ``group`` tokens) and values per token, as KIVI (Liu et al. 2024,
  arXiv:2402.02750) does. KIVI keeps the newest tokens in full precision until a
  group is full; here every token is quantized, the strictest case.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

IMPLEMENTATION = "lowbit_kv_quant"
GRANULARITIES = ("per-tensor", "per-head", "per-token", "kivi")


@dataclass
class KVSetting:
    fmt: str
    granularity: str
    group: int = 32  # kivi: tokens per key scale (formats without their own blocks)
    granular: bool = True  # the format takes a granularity option
    nbytes: int = 0
    numel: int = 0
    bf16_bytes: int = 0
    calls: int = field(default=0)


_ACTIVE: KVSetting | None = None
# Batches of windows run on several threads at once: the byte counts add up under a lock.
_COUNT_LOCK = threading.Lock()


@contextlib.contextmanager
def suspended() -> Iterator[None]:
    """No KV quantization for the duration (the reference model, recomputed mid-run)."""
    global _ACTIVE
    saved, _ACTIVE = _ACTIVE, None
    try:
        yield
    finally:
        _ACTIVE = saved


def _rows(x: torch.Tensor, how: str) -> torch.Tensor:
    b, h, s, d = x.shape
    if how == "per-tensor":
        return x.reshape(1, -1)
    if how == "per-head":
        return x.reshape(b * h, s * d)
    if how == "token":
        return x.reshape(b * h * s, d)
    return x.transpose(-1, -2).reshape(b * h * d, s)  # "channel": rows run over tokens


def _unrows(r: torch.Tensor, like: torch.Tensor, how: str) -> torch.Tensor:
    b, h, s, d = like.shape
    if how == "channel":
        return r.reshape(b, h, d, s).transpose(-1, -2)
    return r.reshape(b, h, s, d)


def quantize_kv(x: torch.Tensor, st: KVSetting, is_key: bool) -> torch.Tensor:
    """Quantize-dequantize one K or V tensor ``[batch, kv_heads, tokens, head_dim]``."""
    from labs.quant import quantize

    how = st.granularity
    opts: dict[str, Any] = {}
    if how == "kivi":
        how = "channel" if is_key else "token"
    if st.granular:
        if how == "per-tensor":
            opts["granularity"] = "tensor"
        elif how == "channel":
            opts["granularity"] = st.group
        else:
            opts["granularity"] = "channel"  # one scale per row of _rows
    rows = _rows(x.float(), how if how in ("channel", "per-tensor", "per-head") else "token")
    q = quantize(rows, st.fmt, **opts)
    with _COUNT_LOCK:
        st.nbytes += int(q.nbytes)
        st.numel += rows.numel()
        st.bf16_bytes += 2 * rows.numel()
    return _unrows(q.dequantize(), x, how).to(x.dtype)


def attention(
    module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any
) -> Any:
    from transformers.integrations.sdpa_attention import sdpa_attention_forward

    st = _ACTIVE
    if st is not None:
        key = quantize_kv(key, st, True)
        value = quantize_kv(value, st, False)
        with _COUNT_LOCK:
            st.calls += 1
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


class quantized_kv:  # noqa: N801 - used as a context manager, like torch.no_grad
    """``with quantized_kv(model, setting):`` — the model's KV cache is quantized inside."""

    def __init__(self, model: Any, setting: KVSetting) -> None:
        self.model = model
        self.setting = setting
        self.previous = getattr(model.config, "_attn_implementation", "sdpa")

    def __enter__(self) -> KVSetting:
        from transformers import AttentionInterface

        global _ACTIVE
        AttentionInterface.register(IMPLEMENTATION, attention)
        _ACTIVE = self.setting
        self.model.set_attn_implementation(IMPLEMENTATION)
        return self.setting

    def __exit__(self, *exc: object) -> None:
        global _ACTIVE
        _ACTIVE = None
        self.model.set_attn_implementation(self.previous)

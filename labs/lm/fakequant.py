"""Weight-only fake quantization of a model's decoder linear layers.

Each selected ``nn.Linear`` weight ``[out, in]`` is replaced by
``labs.quant.quantize(w, fmt).dequantize()`` (blocks along ``in``); embedding,
head and norms stay as trained and activations stay in the model's dtype. The
originals are kept so that a lab can restore them and quantize something else.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import torch


@dataclass
class TensorReport:
    """What quantizing one weight did: stored size and signal-to-quantization-noise ratio."""

    name: str
    shape: list[int]
    numel: int
    nbytes: int  # stored bytes in the format, scales included
    baseline_nbytes: int  # bytes in the model's own dtype
    bits: float  # 8 · nbytes / numel
    sqnr_db: float | None  # 10·log10(Σw² / Σ(w − ŵ)²); None when exact


def sqnr_db(w: torch.Tensor, dq: torch.Tensor) -> float | None:
    err = float((w.double() - dq.double()).pow(2).sum())
    sig = float(w.double().pow(2).sum())
    if err == 0.0 or sig == 0.0:
        return None
    return 10.0 * math.log10(sig / err)


def dtype_bytes(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


class WeightEditor:
    """Swaps decoder weights for their quantized versions and back, by module name."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.originals: dict[str, torch.Tensor] = {}
        _EDITORS.add(self)

    def weight(self, name: str) -> torch.Tensor:
        w: torch.Tensor = self.model.get_submodule(name).weight
        return w

    def original(self, name: str) -> torch.Tensor:
        """The weight as trained (a copy is kept from the first access on)."""
        if name not in self.originals:
            self.originals[name] = self.weight(name).detach().clone()
        return self.originals[name]

    def set(self, name: str, value: torch.Tensor) -> None:
        w = self.weight(name)
        self.original(name)
        with torch.no_grad():
            w.copy_(value.to(w.dtype))

    def restore(self, names: Iterable[str] | None = None) -> None:
        for name in list(self.originals if names is None else names):
            if name in self.originals:
                with torch.no_grad():
                    self.weight(name).copy_(self.originals.pop(name))

    @contextlib.contextmanager
    def originals_in(self) -> Iterator[None]:
        """Every changed weight as trained for the duration, by swapping storage (no copy)."""
        swapped = []
        try:
            for name, orig in self.originals.items():
                w = self.weight(name)
                swapped.append((w, w.data))
                w.data = orig
            yield
        finally:
            for w, current in swapped:
                w.data = current


# Live editors, so that an evaluation can see the model as trained (original_weights)
# without the lab handing its editor over.
_EDITORS: weakref.WeakSet[WeightEditor] = weakref.WeakSet()


@contextlib.contextmanager
def original_weights(model: Any) -> Iterator[None]:
    """``model`` with every weight an editor changed back as trained, for the duration."""
    with contextlib.ExitStack() as stack:
        for ed in list(_EDITORS):
            if ed.model is model:
                stack.enter_context(ed.originals_in())
        yield


def quantize_weight(w: torch.Tensor, fmt: str, options: dict[str, Any]) -> tuple[torch.Tensor, int]:
    """(dequantized float32 weight, stored bytes) of ``w`` in ``fmt``."""
    from labs.quant import quantize

    q = quantize(w.detach().float(), fmt, **options)
    return q.dequantize(), int(q.nbytes)


def report(name: str, w: torch.Tensor, dq: torch.Tensor, nbytes: int) -> TensorReport:
    numel = w.numel()
    return TensorReport(
        name=name,
        shape=list(w.shape),
        numel=numel,
        nbytes=nbytes,
        baseline_nbytes=numel * dtype_bytes(w.dtype),
        bits=8.0 * nbytes / numel,
        sqnr_db=sqnr_db(w, dq),
    )


def quantize_model(
    editor: WeightEditor,
    names: list[str],
    fmt: str,
    options: dict[str, Any] | None = None,
    on_tensor: Callable[[int, int, str], None] | None = None,
) -> list[TensorReport]:
    """Quantize every weight in ``names`` (from its original) in place; one report each."""
    out = []
    for i, name in enumerate(names):
        w = editor.original(name)
        dq, nbytes = quantize_weight(w, fmt, options or {})
        editor.set(name, dq)
        out.append(report(name, w, dq, nbytes))
        if on_tensor is not None:
            on_tensor(i + 1, len(names), name)
    return out


def kept_report(editor: WeightEditor, name: str) -> TensorReport:
    w = editor.original(name)
    return report(name, w, w, w.numel() * dtype_bytes(w.dtype))

"""Reference quantized matmul: where the scales go in a low-precision dot product.

``quantized_matmul(a, w)`` computes ``y = a @ W.T`` for a weight ``w`` quantized along K
(shape (N, K): one row per output channel), with ``a`` either a float tensor (M, K) or
another QuantizedTensor quantized along K. Each operand is ``element * scale + offset``
(``QuantizedTensor.affine``):

- Scales constant along K (``granularity="tensor"`` or ``"channel"``, or a float ``a``):
  the whole-K dot product of the element values is computed first and the scales are
  applied *after* it, ``y[m, n] = s_a[m] * s_w[n] * sum_k e_a[m, k] e_w[n, k]``. That is
  exact, because a scale constant over the sum factors out of it; it is what int8 and
  per-tensor FP8 GEMMs do in their epilogue.
- Block (group) scales: the scale changes inside the sum, so it cannot factor out. The
  dot product is split into K blocks and each partial sum is scaled *inside the
  reduction*: ``y[m, n] = sum_b s_a[m, b] s_w[n, b] sum_{k in b} e_a e_w``; this is what
  MX / NVFP4 tensor cores and GGUF's vec_dot kernels do.
- Offsets (q4_1's block minimum, int zero points) add ``s o' sum e`` cross terms per
  block.

Sums are accumulated in float64, so the result differs from dequantize-then-matmul
only by float64 rounding: what remains is quantization error, not accumulation error.

``scale_placement_error(a, w)`` shows what goes wrong when block scales are instead
applied after the full dot product (one scale per row: the mean, max or first of its
block scales): the error that block-scaled kernels avoid by scaling inside the reduction.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from labs.quant.tensor import QuantizedTensor

if TYPE_CHECKING:
    import torch

ROW_SCALE_CHOICES = ("mean", "max", "first")
MAX_PARTIALS = 1 << 24  # float64 partial sums held at once (128 MiB); larger M is chunked


@dataclass(frozen=True)
class _Operand:
    """An operand as (rows, n_groups, group) float64 element values, zero beyond K,
    and (rows, n_groups) scales and offsets (offset None when zero)."""

    elements: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None
    blocked: bool  # scale varies along K


def _k_len(x: torch.Tensor | QuantizedTensor) -> tuple[int, int]:
    shape = x.shape
    if len(shape) != 2:
        raise ValueError(f"quantized_matmul takes 2-D operands, got shape {tuple(shape)}")
    return shape[0], shape[1]


def _group_len(q: QuantizedTensor) -> int | None:
    """Block length along K when the scale varies along K, else None."""
    if q.format.scale_scope != "block":
        return None
    if q.format.layout_kind == "flat" and q.shape[1] % q.layout.block_len:
        raise ValueError(
            f"{q.key} blocks run over the flattened tensor: K = {q.shape[1]} must be a "
            f"multiple of its block size {q.layout.block_len} to use it in a matmul"
        )
    return q.layout.block_len


def _operand(x: torch.Tensor | QuantizedTensor, group: int) -> _Operand:
    import torch

    rows, k = _k_len(x)
    n_groups = -(-k // group)
    padded_k = n_groups * group
    if not isinstance(x, QuantizedTensor):
        elements = torch.zeros((rows, padded_k), dtype=torch.float64, device=x.device)
        elements[:, :k] = x.to(torch.float64)
        ones = torch.ones((rows, n_groups), dtype=torch.float64, device=x.device)
        return _Operand(elements.reshape(rows, n_groups, group), ones, None, False)

    aff = x.affine()
    scale = aff.scale.to(torch.float64)
    offset = None if aff.offset is None else aff.offset.to(torch.float64)
    values = x.unblock(aff.elements).reshape(rows, k).to(torch.float64)
    elements = torch.zeros((rows, padded_k), dtype=torch.float64, device=values.device)
    elements[:, :k] = values
    if aff.scope == "block":
        scale = scale.reshape(rows, n_groups)
        offset = None if offset is None else offset.reshape(rows, n_groups)
    else:  # one scale per row (channel) or per tensor, constant along K
        scale = scale.reshape(rows, -1)[:, :1].expand(rows, n_groups)
        if offset is not None:
            offset = offset.reshape(rows, -1)[:, :1].expand(rows, n_groups)
    blocked = aff.scope == "block"
    return _Operand(elements.reshape(rows, n_groups, group), scale, offset, blocked)


def _valid_counts(k: int, group: int, n_groups: int, device: torch.device) -> torch.Tensor:
    import torch

    starts = torch.arange(n_groups, device=device, dtype=torch.float64) * group
    return (k - starts).clamp(min=0, max=group)


def quantized_matmul(
    a: torch.Tensor | QuantizedTensor, w: QuantizedTensor, out_dtype: Any = None
) -> torch.Tensor:
    """``a @ dequantize(w).T`` computed the way quantized kernels do (see module doc).

    ``a``: (M, K) float tensor or QuantizedTensor; ``w``: (N, K) QuantizedTensor, both
    quantized along K. Block scales of the two must use the same block length when both
    vary along K. Returns (M, N) in ``out_dtype`` (float32 by default).
    """
    import torch

    if not isinstance(w, QuantizedTensor):
        raise TypeError("w must be a QuantizedTensor (quantize the weight first)")
    m, k = _k_len(a)
    n, k_w = _k_len(w)
    if k != k_w:
        raise ValueError(f"inner dimensions differ: a has K = {k}, w has K = {k_w}")
    groups = {
        g for g in (_group_len(w), _group_len(a) if isinstance(a, QuantizedTensor) else None) if g
    }
    if len(groups) > 1:
        raise ValueError(f"a and w use different block lengths {sorted(groups)} along K")
    group = groups.pop() if groups else k
    op_a, op_w = _operand(a, group), _operand(w, group)
    n_groups = op_a.scale.shape[1]
    counts = _valid_counts(k, group, n_groups, op_w.elements.device)

    rows_per_chunk = max(1, MAX_PARTIALS // max(1, n * n_groups))
    out = torch.empty((m, n), dtype=torch.float64, device=op_w.elements.device)
    for start in range(0, m, rows_per_chunk):
        stop = min(m, start + rows_per_chunk)
        ea, sa = op_a.elements[start:stop], op_a.scale[start:stop]
        oa = None if op_a.offset is None else op_a.offset[start:stop]
        # partial[b, i, j] = sum over block b of e_a[i, k] * e_w[j, k]
        partial = torch.bmm(ea.transpose(0, 1), op_w.elements.permute(1, 2, 0))
        y = torch.einsum("bij,ib,jb->ij", partial, sa, op_w.scale)
        if op_w.offset is not None:  # sum_k a_k * o_w = o_w * s_a * sum e_a (+ o_a count)
            y += torch.einsum("ib,ib,jb->ij", sa, ea.sum(dim=2), op_w.offset)
        if oa is not None:
            y += torch.einsum("ib,jb,jb->ij", oa, op_w.scale, op_w.elements.sum(dim=2))
            if op_w.offset is not None:
                y += torch.einsum("ib,jb,b->ij", oa, op_w.offset, counts)
        out[start:stop] = y
    return out.to(out_dtype or torch.float32)


@dataclass(frozen=True)
class ScalePlacementReport:
    """Block scales inside the reduction vs one scale per row after it."""

    exact: torch.Tensor  # dequantize both operands, then matmul (float64)
    inside: torch.Tensor  # quantized_matmul: scales per block inside the reduction
    after: torch.Tensor  # whole-K dot of element values, one scale per row afterwards
    row_scale: str
    scales_vary_along_k: bool

    def as_dict(self) -> dict[str, Any]:
        """Max absolute and relative RMS errors of both placements against ``exact``."""
        inside_err = (self.inside.double() - self.exact).abs()
        after_err = (self.after.double() - self.exact).abs()
        norm = self.exact.pow(2).mean().sqrt().item() or 1.0
        return {
            "row_scale": self.row_scale,
            "scales_vary_along_k": self.scales_vary_along_k,
            "inside_max_abs_error": inside_err.max().item(),
            "after_max_abs_error": after_err.max().item(),
            "inside_relative_rms_error": inside_err.pow(2).mean().sqrt().item() / norm,
            "after_relative_rms_error": after_err.pow(2).mean().sqrt().item() / norm,
        }


def _one_scale_per_row(op: _Operand, row_scale: str) -> torch.Tensor:
    if row_scale == "mean":
        return op.scale.mean(dim=1)
    if row_scale == "max":
        return op.scale.abs().amax(dim=1)
    return op.scale[:, 0]


def scale_placement_error(
    a: torch.Tensor | QuantizedTensor, w: QuantizedTensor, row_scale: str = "mean"
) -> ScalePlacementReport:
    """Compare scaling inside the reduction with scaling after the full dot product.

    ``after`` multiplies the whole-K dot product of the element values by one scale per
    row of each operand (``row_scale``: "mean", "max" or "first" of the row's block
    scales). With per-tensor or per-channel scales ``after`` is exact; with block
    scales it is not, and ``as_dict()`` shows by how much.
    """
    import torch

    if row_scale not in ROW_SCALE_CHOICES:
        raise ValueError(f"row_scale={row_scale!r} is not one of {list(ROW_SCALE_CHOICES)}")
    a_hp = a.dequantize() if isinstance(a, QuantizedTensor) else a
    exact = a_hp.to(torch.float64) @ w.dequantize().to(torch.float64).T
    inside = quantized_matmul(a, w, out_dtype=torch.float64)
    k = _k_len(w)[1]
    group = _group_len(w) or (_group_len(a) if isinstance(a, QuantizedTensor) else None) or k
    op_a, op_w = _operand(a, group), _operand(w, group)
    if op_w.offset is not None or op_a.offset is not None:
        raise ValueError("scale_placement_error takes symmetric formats (no offsets)")
    dot = op_a.elements.flatten(1) @ op_w.elements.flatten(1).T
    after = dot * _one_scale_per_row(op_a, row_scale)[:, None] * _one_scale_per_row(op_w, row_scale)
    return ScalePlacementReport(exact, inside, after, row_scale, op_a.blocked or op_w.blocked)

"""GPTQ (Frantar, Ashkboos, Hoefler, Alistarh 2022, arXiv:2210.17323) on labs.quant formats.

GPTQ quantizes a linear layer's weight ``W [out, in]`` one input column at a
time and spreads each column's rounding error over the columns not yet
quantized, weighted by the inverse Hessian ``H = 2 XᵀX`` of the layer's
calibration inputs ``X [n, in]``. That minimises ``‖XWᵀ − XŴᵀ‖²`` far better
than rounding each weight to nearest.

Faithful to the reference implementation:
- dead inputs (``H_ii = 0``) get ``H_ii = 1`` and a zero weight column;
- damping ``λ = damp · mean(diag H)`` is added to the diagonal;
- the Cholesky factor of ``H⁻¹`` (upper) gives the error-propagation rows;
- columns are processed in blocks of ``block_columns`` with lazy batch updates
  of the rest of the matrix (same result as column by column, fewer passes);
- at the first column of each quantization group the group's grid (scale and
  offset) is fixed from the current, already error-updated weights; optional
  ``act_order`` visits columns by descending ``H_ii``.

The grid comes from the format itself (public ``labs.quant`` API only): the
group's scales are those ``quantize`` picks for the current weights, and each
column is rounded to the nearest element of the format's element table at that
scale. So the result is storable in the same format, in the same bytes.
Imports torch; nothing from the rest of ``labs``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from labs.quant.api import get_format, quantize

NATIVE: ModuleType | None
try:  # GPTQ's column loop in C (_gptq.c), built by the install where a C compiler is
    import labs.quant._gptq as NATIVE
except ImportError:  # pragma: no cover - depends on the build
    NATIVE = None


# The probe's tables for every format as configured by default, and at tensor and
# channel granularity where it has one, stored by ``write_element_tables``: a probe costs
# 0.02-0.3 s, and every lab child (a fresh process) paid it on its first GPTQ (0.12 s
# for int4, of a 3 s run). test_gptq_tables.py probes each again and compares.
TABLES_FILE = Path(__file__).with_name("element_tables.json")


def _table_name(key: str, options: tuple[tuple[str, Any], ...]) -> str:
    return ";".join([key, *(f"{k}={v}" for k, v in options)])


@cache
def _stored_tables() -> dict[str, list[float]]:
    try:
        tables: dict[str, list[float]] = json.loads(TABLES_FILE.read_text())
    except (OSError, ValueError):  # missing or damaged: every table is probed
        return {}
    return tables


@cache
def element_table(key: str, options: tuple[tuple[str, Any], ...]) -> torch.Tensor:
    """Sorted float32 values the format's elements can take (before scaling): the stored
    probe (``TABLES_FILE``) where there is one, else ``probe_elements``."""
    stored = _stored_tables().get(_table_name(key, options))
    if stored is not None:
        return torch.tensor(stored, dtype=torch.float32)
    return probe_elements(key, options)


def probe_elements(key: str, options: tuple[tuple[str, Any], ...]) -> torch.Tensor:
    """The element values format ``key`` reaches, probed through the public API: blocks
    ``[±a, t, 0, …]`` for anchors ``a`` in ``[1, 2)`` (MX's floor rule leaves
    ``amax/scale`` anywhere in ``[4, 8)``, so the top elements appear only for some
    anchors) and ``t`` sweeping ``[-a, a]`` decode to every element value the format
    reaches."""
    fmt = get_format(key, **dict(options))
    width = max(fmt.block_size or 256, 2)
    t = torch.linspace(-1.0, 1.0, 2049)
    rows = []
    for a in (1.0, 1.3, 1.7, 1.99):
        for sign in (1.0, -1.0):  # negative anchors reach asymmetric codes
            x = torch.zeros(t.numel(), width)
            x[:, 0], x[:, 1] = sign * a, a * t
            rows.append(x)
    x = torch.cat(rows)
    if fmt.layout_kind == "flat":
        x = x.reshape(1, -1)
    aff = quantize(x, fmt).affine()
    return torch.unique(aff.elements.float()).sort().values


def stored_configurations() -> list[tuple[str, tuple[tuple[str, Any], ...]]]:
    """Which (format, options) ``TABLES_FILE`` holds: every format as configured by
    default, and at tensor and channel granularity where it has one."""
    from labs.quant import FORMATS

    out: list[tuple[str, tuple[tuple[str, Any], ...]]] = [(k, ()) for k in FORMATS]
    for k in FORMATS:
        if "granularity" in get_format(k).options():
            out += [(k, (("granularity", g),)) for g in ("tensor", "channel")]
    return out


def write_element_tables() -> None:
    """Probe every stored configuration and write ``TABLES_FILE`` (run after changing a
    format: ``python -m labs.quant.gptq``)."""
    lines = [
        f"{json.dumps(_table_name(k, o))}: {json.dumps(probe_elements(k, o).tolist())}"
        for k, o in stored_configurations()
    ]
    TABLES_FILE.write_text("{\n" + ",\n".join(lines) + "\n}\n")  # a table a line


def grid(q: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """Per element of ``q``'s tensor: the effective scale and offset of its block."""
    scale, offset = q.scale_offset()
    n, b = q.n_blocks, q.layout.block_len
    s = q.unblock(scale.float()[:, None].expand(n, b).contiguous())
    o = (
        torch.zeros_like(s)
        if offset is None
        else q.unblock(offset.float()[:, None].expand(n, b).contiguous())
    )
    return s, o


def round_to_grid(
    w: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor, table: torch.Tensor
) -> torch.Tensor:
    """Nearest representable value ``table[k] · scale + offset`` to each ``w`` (ties go down)."""
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    u = (w - offset) / safe
    idx = torch.bucketize(u, table).clamp(1, table.numel() - 1)
    lo, hi = table[idx - 1], table[idx]
    e = torch.where((u - lo) <= (hi - u), lo, hi)
    return torch.where(scale == 0, offset, e * scale + offset)


def _transposed_grid(
    scale: torch.Tensor, offset: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``scale``, ``offset`` and ``1/scale`` (0 where the scale is 0), each ``[in, out]``."""
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    return scale.T.contiguous(), offset.T.contiguous(), inv.T.contiguous()


SYMMETRIC, SHIFTED, TABLE = 0, 1, 2  # how a column is rounded (as _gptq.c numbers them)


def _columns(
    W1: torch.Tensor,
    Q1: torch.Tensor,
    Err1: torch.Tensor,
    Hinv1: torch.Tensor,
    a: int,
    b: int,
    g1: list[torch.Tensor],
    mode: int,
    lo: float,
    hi: float,
    table: torch.Tensor,
) -> None:
    """GPTQ's loop over columns ``a..b-1`` of a block, in place, in torch: each column
    of ``W1 [k, out]`` (a column of W is a row here) rounded into ``Q1`` on its grid
    ``g1`` (scale, offset, 1/scale, each [k, out]), its error over ``H⁻¹``'s diagonal
    into ``Err1``, then subtracted, weighted by ``Hinv1``'s row, from the block's
    columns from it on. Where the C kernel is built (``NATIVE``) it runs this loop
    instead, with the same numbers; this one runs on other devices and is the reference
    the tests compare it with.

    The rank-1 update is an outer product then a subtraction, as the reference's
    ``W1[:, i:] -= err ⊗ Hinv1[i, i:]``; every view it needs (each column, each tail of
    the block, each row of H⁻¹) is taken once per call, not once per column."""
    diag = Hinv1.diagonal().unbind(0)
    w_cols, q_cols, e_cols = W1.unbind(0), Q1.unbind(0), Err1.unbind(0)
    s_cols, o_cols, inv_cols = (m.unbind(0) for m in g1)
    for i in range(a, b):
        wcol, qcol = w_cols[i], q_cols[i]  # qcol is written in place
        if mode == SHIFTED:  # evenly spaced elements with offsets: round and clamp
            torch.sub(wcol, o_cols[i], out=qcol).mul_(inv_cols[i])
            qcol.round_().clamp_(lo, hi).mul_(s_cols[i]).add_(o_cols[i])
        elif mode == SYMMETRIC:  # the common int case: no offset to take and add
            torch.mul(wcol, inv_cols[i], out=qcol).round_().clamp_(lo, hi).mul_(s_cols[i])
        else:
            qcol.copy_(round_to_grid(wcol, s_cols[i], o_cols[i], table))
        err = torch.sub(wcol, qcol, out=e_cols[i]).div_(diag[i])
        W1[i:].sub_(torch.outer(Hinv1[i, i:], err))


@dataclass
class GPTQResult:
    weight: torch.Tensor  # float32 [out, in], on the format's grid
    nbytes: int  # stored bytes in the format
    proxy_loss: float  # Σ (w − q)² / [H⁻¹]_jj² summed, GPTQ's own objective estimate


def hessian(x: torch.Tensor) -> torch.Tensor:
    """``2 XᵀX / n`` in float32 from calibration inputs ``x [..., in]``."""
    x = x.reshape(-1, x.shape[-1]).float()
    return 2.0 * x.T @ x / x.shape[0]


def _consecutive_integers(table: torch.Tensor) -> bool:
    """Whether the element table is every integer from its first to its last."""
    steps = torch.arange(int(table[0]), int(table[-1]) + 1, device=table.device).float()
    return bool(torch.equal(table, steps))


def _prepared(
    w: torch.Tensor, h: torch.Tensor, damp: float, act_order: bool
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
    """The weight (dead columns zeroed, permuted with act_order), the upper Cholesky
    factor of the damped inverse Hessian, and the permutation (or None)."""
    W = w.detach().float().clone()
    H = h.detach().float().clone()
    dead = torch.diag(H) == 0
    H[dead, dead] = 1.0
    W[:, dead] = 0.0
    perm = torch.argsort(torch.diag(H), descending=True) if act_order else None
    if perm is not None:
        W, H = W[:, perm], H[perm][:, perm]
    H += damp * torch.mean(torch.diag(H)) * torch.eye(W.shape[1], device=H.device)
    L = torch.linalg.cholesky(H)
    return W, torch.linalg.cholesky(torch.cholesky_inverse(L), upper=True), perm


def gptq(
    w: torch.Tensor,
    h: torch.Tensor,
    key: str,
    options: dict[str, Any] | None = None,
    *,
    damp: float = 0.01,
    block_columns: int = 128,
    act_order: bool = False,
) -> GPTQResult:
    """Quantize ``w [out, in]`` to format ``key`` with GPTQ, given Hessian ``h [in, in]``."""
    opts = dict(options or {})
    fmt = get_format(key, **opts)
    table = element_table(key, tuple(sorted(opts.items()))).to(w.device)
    W, Hinv, perm = _prepared(w, h, damp, act_order)
    cols = W.shape[1]

    # Groups are contiguous input columns, as the formats store them. With act_order
    # (or one scale per row/tensor) every grid is fixed up front from the original
    # weights ("static groups"); otherwise at each group's first column.
    group = fmt.block_size if fmt.scale_scope == "block" and not act_order else None
    # Without a per-tensor scale a group's grid depends on its own columns only, so the
    # group alone is quantized to find it (same grid, far cheaper than the whole matrix).
    local = not fmt.spec.two_level
    scale = offset = None
    if group is None:
        scale, offset = grid(quantize(w.detach().float(), fmt))
        if perm is not None:
            scale, offset = scale[:, perm], offset[:, perm]
    integer = _consecutive_integers(table)
    lo, hi = float(table[0]), float(table[-1])
    # Worked on Wᵀ [in, out]: a column of W is a contiguous row, so each column's ops
    # read and write one cache-friendly vector (1.3-2.5× faster than strided columns),
    # bit for bit the same as the column-major loop. The columns themselves run in C on
    # a CPU where the install built the kernel (``_columns``, ``NATIVE``).
    WT = W.T.contiguous()
    QT = torch.zeros_like(WT)
    loss = torch.zeros((), dtype=torch.float64, device=W.device)
    # The grid's scale, offset and 1/scale per element, transposed like WT.
    gridT: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None
    if scale is not None and offset is not None:
        gridT = _transposed_grid(scale, offset)
    shifted = gridT is not None and bool(gridT[1].any())  # any block with an offset
    native = NATIVE if W.device.type == "cpu" else None
    for i1 in range(0, cols, block_columns):
        i2 = min(i1 + block_columns, cols)
        W1 = WT[i1:i2].clone()  # [k, out]
        Q1 = torch.zeros_like(W1)
        Err1 = torch.zeros_like(W1)
        Hinv1 = Hinv[i1:i2, i1:i2].contiguous()
        # Runs of columns that share a grid: split where a group starts.
        cuts = [i for i in range(1, i2 - i1) if group is not None and (i1 + i) % group == 0]
        for a, b in zip([0, *cuts], [*cuts, i2 - i1], strict=True):
            col = i1 + a
            if group is not None and col % group == 0:
                # The group's grid from the current (error-updated) weights, as the
                # reference implementation's find_params does at each group start.
                if local:  # the group's own columns (all at or after col: none quantized)
                    part = torch.cat(
                        [W1[a : a + group], WT[i2 : i2 + max(0, a + group - (i2 - i1))]]
                    )
                    gs, go = grid(quantize(part.T, fmt))
                    if gridT is None:
                        gridT = (torch.zeros_like(WT), torch.zeros_like(WT), torch.zeros_like(WT))
                    for m, v in zip(gridT, _transposed_grid(gs, go), strict=True):
                        m[col : col + group] = v
                    shifted = shifted or bool(go.any())
                else:
                    cur = torch.cat([QT[:i1], Q1[:a], W1[a:], WT[i2:]]).T
                    gridT = _transposed_grid(*grid(quantize(cur, fmt)))
                    shifted = bool(gridT[1].any())
            assert gridT is not None
            mode = (SHIFTED if shifted else SYMMETRIC) if integer else TABLE
            g1 = [m[i1:i2] for m in gridT]  # the block's rows of the grid, [k, out] each
            if native is not None:
                native.columns(
                    *(t.numpy() for t in (W1, Q1, Err1, Hinv1)),
                    *W1.shape,
                    a,
                    b,
                    *(t.numpy() for t in g1),
                    mode,
                    lo,
                    hi,
                    table.numpy(),
                )
            else:
                _columns(W1, Q1, Err1, Hinv1, a, b, g1, mode, lo, hi, table)
        loss += Err1.double().pow(2).sum() / 2  # once per block, not per column
        QT[i1:i2] = Q1
        WT[i2:] -= Hinv[i1:i2, i2:].T @ Err1
    Q = QT.T
    if perm is not None:
        Q = Q[:, torch.argsort(perm)]
    Q = Q.contiguous()
    return GPTQResult(Q, int(quantize(Q, fmt).nbytes), float(loss))


if __name__ == "__main__":
    write_element_tables()

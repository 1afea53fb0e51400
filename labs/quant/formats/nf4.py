"""NF4 (QLoRA 4-bit NormalFloat): blocks of 64 over the flattened tensor, float32 absmax.

Dettmers et al., "QLoRA" (arXiv:2305.14314), section 3 and appendix E; reference code:
bitsandbytes ``functional.quantize_4bit(quant_type="nf4")`` (its torch backend,
``backends/default/ops.py``):

    absmax[b] = max |x| over block b                      (float32)
    y         = clamp(x * (1 / max(absmax[b], 1e-38)), -1, 1)
    code      = number of table midpoints strictly below y

so a value exactly on a midpoint takes the lower code (bitsandbytes' bucketize with
right=False, and its CUDA kernel's ``x > midpoint`` decision tree). The midpoints are the
float32 means of neighbouring table entries.

``double_quant=True`` is QLoRA's double quantization (bitsandbytes
``compress_statistics=True``): the absmax values minus their mean are quantized to 8 bits
with bitsandbytes' signed dynamic map in blocks of 256 (a float32 absmax per 256 blocks),
the mean stored once as float32. The elements are quantized with the exact absmax, as in
bitsandbytes; only dequantization sees the compressed one. Two deliberate differences:
each absmax takes the exact nearest entry of the dynamic map (bitsandbytes' CPU search,
BinSearch "Direct2", occasionally returns the neighbour), and the mean is accumulated in
float64 so that CPU and CUDA agree to the bit (bitsandbytes sums in float32).

Stored layout: two codes per byte, element 2i in the *high* nibble (bitsandbytes'
layout), then the float32 absmax values; with double_quant: the uint8 absmax codes, the
float32 second-level absmax values, then the float32 mean.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import labs.quant.constants as C
from labs.quant.blockops import block_absmax, nonzero_divisor
from labs.quant.core import Format
from labs.quant.layout import Layout
from labs.quant.packing import le_bytes, pack_nibbles
from labs.quant.spec import FP32_BITS, SPECS, FormatKey, FormatSpec

if TYPE_CHECKING:
    import torch

# Lookup grid for the midpoint search: the normalised value y in [-1, 1] picks one of
# NF4_GRID_CELLS equal cells; each cell holds at most one midpoint (the closest two are
# 0.08 apart, a cell is 2/64 wide), so code = (midpoints below the cell) + (y > the
# cell's midpoint). Exact, and no binary search (torch.bucketize is slow on CPU).
NF4_GRID_CELLS = 64
NF4_GRID_MARGIN = 1e-6  # midpoints must be this far from cell edges (fp32 rounding of y)
DYNAMIC_MAP_EXPONENT_BITS = 7  # bitsandbytes create_dynamic_map defaults
DYNAMIC_MAP_TOTAL_BITS = 8


@cache
def nf4_midpoints() -> tuple[float, ...]:
    """The float32 midpoints between neighbouring NF4 table values (15 of them)."""
    import numpy as np

    table = np.asarray(C.NF4_TABLE, dtype=np.float32)
    return tuple(float(v) for v in (table[:-1] + table[1:]) / np.float32(2))


@cache
def _nf4_grid() -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Per cell: the number of midpoints below it and the order key of the midpoint in
    it (a key above every y when the cell has none)."""
    import numpy as np

    mids = np.asarray(nf4_midpoints(), dtype=np.float32)
    width = 2.0 / NF4_GRID_CELLS
    below, keys = [], []
    no_midpoint = _order_key_scalar(2.0)
    for cell in range(NF4_GRID_CELLS):
        lo, hi = -1.0 + cell * width, -1.0 + (cell + 1) * width
        inside = mids[(mids >= lo) & (mids < hi)]
        if len(inside) > 1 or np.any(np.abs(mids - lo) < NF4_GRID_MARGIN):
            raise AssertionError("NF4 grid cells must hold at most one midpoint, off the edges")
        below.append(int(np.sum(mids < lo)))
        keys.append(_order_key_scalar(float(inside[0])) if len(inside) else no_midpoint)
    return tuple(below), tuple(keys)


def _order_key_scalar(value: float) -> int:
    import numpy as np

    bits = int(np.float32(value).view(np.int32))
    return bits ^ 0x7FFFFFFF if bits < 0 else bits


def order_key(x_fp32: torch.Tensor) -> torch.Tensor:
    """int32 keys that order like the float32 values (negative floats flip their
    magnitude bits), so comparisons become integer subtractions."""
    import torch

    bits = x_fp32.view(torch.int32)
    return bits ^ ((bits >> 31) & C.F32_SIGN_MASK)


_GRID_TABLES: dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]] = {}


def _grid_tables(device: torch.device) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    import torch

    key = str(device)
    if key not in _GRID_TABLES:
        below, keys = _nf4_grid()
        _GRID_TABLES[key] = (
            torch.tensor(below, dtype=torch.int32, device=device),
            torch.tensor(keys, dtype=torch.int32, device=device),
            torch.tensor(C.NF4_TABLE, dtype=torch.float32, device=device),
        )
    return _GRID_TABLES[key]


def nf4_encode(y: torch.Tensor) -> torch.Tensor:
    """NF4 codes of normalised values ``y`` in [-1, 1]: the count of midpoints < y."""
    import torch

    below, midpoint_keys, _ = _grid_tables(y.device)
    flat = y.reshape(-1)
    cell = (flat + 1.0).mul_(NF4_GRID_CELLS / 2).to(torch.int32).clamp_(0, NF4_GRID_CELLS - 1)
    # (midpoint_key - key(y)) >> 31 is -1 exactly when y > midpoint.
    above = (
        torch.index_select(midpoint_keys, 0, cell).sub_(order_key(flat)).bitwise_right_shift_(31)
    )
    codes = torch.index_select(below, 0, cell).sub_(above)
    return codes.to(torch.uint8).reshape(y.shape)


@cache
def dynamic_map() -> tuple[float, ...]:
    """bitsandbytes ``create_dynamic_map(signed=True)``: 256 sorted values in [-1, 1],
    built with the same float32 torch operations so every value matches to the bit."""
    import torch

    data: list[float] = []
    non_sign_bits = DYNAMIC_MAP_TOTAL_BITS - 1
    for i in range(DYNAMIC_MAP_EXPONENT_BITS):
        fraction_items = 2 ** (i + non_sign_bits - DYNAMIC_MAP_EXPONENT_BITS) + 1
        boundaries = torch.linspace(0.1, 1, fraction_items, dtype=torch.float32)
        means = (boundaries[:-1] + boundaries[1:]) / 2.0
        magnitude = 10 ** (-(DYNAMIC_MAP_EXPONENT_BITS - 1) + i)
        data += (magnitude * means).tolist()
        data += (-magnitude * means).tolist()
    data += [0.0, 1.0]
    data.sort()
    return tuple(data)


@dataclass(frozen=True)
class NF4(Format, key="nf4"):
    double_quant: bool = False

    def __post_init__(self) -> None:
        super().__post_init__()
        if not isinstance(self.double_quant, bool):
            raise ValueError(f"nf4: double_quant must be True or False, got {self.double_quant!r}")

    @property
    def spec(self) -> FormatSpec:
        row = SPECS[FormatKey.NF4]
        if not self.double_quant:
            return row
        # QLoRA double quantization: an 8-bit code per block absmax, an fp32 absmax per
        # 256 of them, and their fp32 mean once per tensor.
        return row.replace(
            scale_bits=C.BITS_PER_BYTE,
            scales_block=C.NF4_DOUBLE_QUANT_BLOCK_SIZE,
            scales_block_bits=FP32_BITS,
            tensor_scale_bits=FP32_BITS,
        )

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor], layout: Layout
    ) -> dict[str, torch.Tensor]:
        """With double_quant: the mean of the absmax values and the second-level absmax of
        each group of 256 of them, centred on that mean."""
        import torch

        if not self.double_quant:
            return {}
        absmax = stats["amax"]
        offset = absmax.to(torch.float64).mean().to(torch.float32)
        absmax2 = block_absmax(_absmax_groups(absmax, offset))
        return {"absmax2_fp32": absmax2, "absmax_offset_fp32": offset}

    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        import torch

        absmax = stats["amax"]
        # The elements use the exact absmax, as in bitsandbytes; with double_quant only
        # dequantization sees the 8-bit one.
        params = {"inverse": 1.0 / absmax.clamp(min=C.NF4_ABSMAX_FLOOR)}
        if not self.double_quant:
            return {"absmax_fp32": absmax}, params
        groups = _absmax_groups(absmax, tensor["absmax_offset_fp32"])
        normalised = groups / nonzero_divisor(tensor["absmax2_fp32"])[:, None]
        table = torch.tensor(dynamic_map(), dtype=torch.float32, device=absmax.device)
        midpoints = (table[:-1] + table[1:]) / 2
        codes = torch.bucketize(normalised, midpoints).to(torch.uint8).reshape(-1)
        return {"absmax_code": codes[: absmax.numel()]}, params

    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        y = (x_hp * params["inverse"][:, None]).clamp_(-C.NF4_NORMALIZED_MAX, C.NF4_NORMALIZED_MAX)
        return nf4_encode(y)

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        import torch

        if not self.double_quant:
            return fields["absmax_fp32"]
        codes = fields["absmax_code"]
        table = torch.tensor(dynamic_map(), dtype=torch.float32, device=codes.device)
        group = torch.arange(codes.numel(), device=codes.device) // C.NF4_DOUBLE_QUANT_BLOCK_SIZE
        absmax2 = tensor["absmax2_fp32"][group]
        return table[codes.to(torch.int64)] * absmax2 + tensor["absmax_offset_fp32"]

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        import torch

        _, _, table = _grid_tables(codes.device)
        flat = torch.index_select(table, 0, codes.reshape(-1).to(torch.int32))
        return flat.reshape(codes.shape)

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        import torch

        payload = pack_nibbles(codes, high_first=True)
        if not self.double_quant:
            return torch.cat([payload, le_bytes(fields["absmax_fp32"])])
        return torch.cat(
            [
                payload,
                fields["absmax_code"],
                le_bytes(tensor["absmax2_fp32"]),
                le_bytes(tensor["absmax_offset_fp32"]),
            ]
        )


def _absmax_groups(absmax: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """The absmax values minus their mean, zero-padded into rows of 256 (QLoRA's blocks
    for the second quantization)."""
    import torch

    centred = absmax - offset
    pad = -centred.numel() % C.NF4_DOUBLE_QUANT_BLOCK_SIZE
    return torch.cat([centred, centred.new_zeros(pad)]).reshape(-1, C.NF4_DOUBLE_QUANT_BLOCK_SIZE)

"""QuantizedTensor, what ``quantize`` returns, and Affine, its ``value = element · scale +
offset`` view. Both read the format for everything format-specific: sizes, decoding,
packing. What they read of it is ``TensorFormat``, which ``labs.quant.core.Format``
implements; this module does not import core, which imports it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import torch

    from labs.quant.layout import Layout


class TensorFormat(Protocol):
    """The part of a format (``labs.quant.core.Format``) a quantized tensor reads."""

    @property
    def key(self) -> str: ...

    @property
    def scale_scope(self) -> str: ...

    @property
    def layout_kind(self) -> str: ...

    def options(self) -> dict[str, Any]: ...

    def storage_bytes(self, layout: Layout) -> int: ...

    def payload_bytes(self, layout: Layout) -> int: ...

    def element_range(self) -> tuple[float, float]: ...

    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor: ...

    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor: ...

    def decode_zero_points(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor | None: ...

    def scale_offset(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> tuple[torch.Tensor, torch.Tensor | None]: ...

    def dequantize_all(self, q: QuantizedTensor) -> torch.Tensor: ...

    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor: ...


@dataclass(frozen=True)
class Affine:
    """``value = element * scale + offset``: element values shaped like the blocks
    (n_blocks, block_len); ``scale`` and ``offset`` per block (offset None when zero);
    ``scope`` says where the scale is constant: "tensor", "channel" or "block"."""

    elements: torch.Tensor
    scale: torch.Tensor
    offset: torch.Tensor | None
    scope: str


class QuantizedTensor:
    """The result of ``quantize``: codes and scales plus what is needed to undo them.

    ``codes`` (same shape as the input, integer), ``scales`` (float32, 1-D, row-major
    block order), ``nbytes`` (every stored byte), ``padded`` (elements added to fill the
    last block of each row), ``dequantize()`` and ``to_bytes()``.
    """

    def __init__(
        self,
        fmt: TensorFormat,
        layout: Layout,
        dtype: torch.dtype,
        qdata: torch.Tensor,
        fields: dict[str, torch.Tensor],
        tensor: dict[str, torch.Tensor],
    ) -> None:
        self.format = fmt
        self.layout = layout
        self.dtype = dtype
        self.qdata = qdata  # (n_blocks, block_len) codes, padding included
        self.fields = fields
        self.tensor_fields = tensor

    def __repr__(self) -> str:
        options = ", ".join(f"{k}={v!r}" for k, v in self.format.options().items())
        return (
            f"QuantizedTensor({self.format.key}, shape={self.shape}, {options}, "
            f"nbytes={self.nbytes}, padded={self.padded})"
        )

    @property
    def key(self) -> str:
        return self.format.key

    @property
    def shape(self) -> tuple[int, ...]:
        return self.layout.shape

    @property
    def device(self) -> torch.device:
        return self.qdata.device

    @property
    def padded(self) -> int:
        """Elements added to complete the last block of each row (0 when none)."""
        return self.layout.padded

    @property
    def n_blocks(self) -> int:
        return self.layout.n_blocks

    @property
    def nbytes(self) -> int:
        """Every stored byte: payload, block scales, zero points, per-tensor scales."""
        return self.format.storage_bytes(self.layout)

    @property
    def payload_nbytes(self) -> int:
        return self.format.payload_bytes(self.layout)

    @property
    def codes(self) -> torch.Tensor:
        """Each element's code, unpacked, same shape as the input."""
        return self.unblock(self.qdata)

    @property
    def scales(self) -> torch.Tensor:
        """Decoded stored scales (float32, 1-D, row-major block order).

        One per block for block formats, one per row for ``granularity="channel"``, a
        single value for ``granularity="tensor"``. NVFP4's are the decoded E4M3 block
        scales; its float32 tensor scale is ``tensor_scale``.
        """
        return self.format.decode_scales(self.fields, self.tensor_fields)

    @property
    def tensor_scale(self) -> torch.Tensor | None:
        """The float32 per-tensor scale of two-level formats (NVFP4), else None."""
        return self.tensor_fields.get("tensor_scale_fp32")

    @property
    def zero_points(self) -> torch.Tensor | None:
        """Stored zero points (int formats with ``zero_point=True``) or block minimums
        (q4_1's ``m``, decoded to float32); None for symmetric formats."""
        return self.format.decode_zero_points(self.fields, self.tensor_fields)

    def unblock(self, blocks: torch.Tensor) -> torch.Tensor:
        """(n_blocks, block_len) back to the input's shape, padding dropped."""
        layout = self.layout
        rows = blocks.reshape(layout.n_rows, layout.padded_row_len)
        if layout.padded:
            rows = rows[:, : layout.row_len]
        return rows.reshape(layout.shape)

    def scale_offset(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per block: effective float32 scale and additive offset (None when zero)."""
        return self.format.scale_offset(self.fields, self.tensor_fields, self.layout)

    def dequantize(self) -> torch.Tensor:
        """Float32 tensor with the input's shape, on the input's device."""
        return self.unblock(self.format.dequantize_all(self))

    def affine(self) -> Affine:
        """Element values (blocks), per-block scale and offset: see ``Affine``."""
        scale, offset = self.scale_offset()
        elements = self.format.decode_elements(self.qdata)
        return Affine(elements, scale, offset, self.format.scale_scope)

    def block_bounds(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per block, the smallest and largest value the quantizer can produce (float32).
        A value outside them was clipped."""
        import torch

        scale, offset = self.scale_offset()
        lo_elem, hi_elem = self.format.element_range()
        lo = torch.minimum(lo_elem * scale, hi_elem * scale)
        hi = torch.maximum(lo_elem * scale, hi_elem * scale)
        if offset is not None:
            lo, hi = lo + offset, hi + offset
        return lo, hi

    def to_bytes(self) -> bytes:
        """The packed stored representation (GGUF's block layout for the q* formats)."""
        packed = self.format.pack(self.qdata, self.fields, self.tensor_fields)
        return packed.cpu().numpy().tobytes()

"""The Format base class and the registry (``quantize``: api.py; ``QuantizedTensor``: tensor.py).

Each format is one class registered by key (``class Q4_0(GGUFFormat, key="q4_0")``) plus
its row in ``labs.quant.spec``, which fixes its block, element and scale bits: the base
class derives ``block_size``, ``bits_per_value``, the byte counts, the element range and
the block shape from it. The class implements only block-level work: ``block_scales``
(from per-block stats such as absmax: the stored scales, and what the encoder multiplies
or divides by), ``encode_blocks`` (elements to codes), ``decode_elements`` and
``decode_scales`` for the way back, and ``pack`` (its byte layout). This base class does
everything around the blocks: it checks the input, flattens it to rows, pads the last
dim up to a whole number of blocks, hands the blocks over in cache-sized chunks, checks
for non-finite input, and reassembles shapes.

Why chunks: in eager torch every elementwise op reads and writes its whole operand, so a
quantizer of twenty ops would stream a 64 MiB tensor through memory twenty times. Feeding
256 KiB of blocks per thread at a time keeps the intermediates in L2 cache. Chunks are
whole blocks and every op inside is elementwise or per block, so the result does not
depend on the chunk size (tests compare CPU and CUDA bit for bit). On the CPU the chunks
run on parallel Python threads with single-threaded ops (labs.quant.parallel: no
intra-op barriers, each chunk in its own core's cache). On an accelerator the chunk is
large, since there the cost is kernel launches, not cache misses.
"""

from __future__ import annotations

import dataclasses
import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from labs.quant.blockops import block_absmax
from labs.quant.layout import Layout
from labs.quant.parallel import map_chunks
from labs.quant.spec import SPECS, FormatKey, FormatSpec
from labs.quant.tensor import QuantizedTensor

if TYPE_CHECKING:
    import torch

R = TypeVar("R")
NONFINITE_MODES = ("raise", "propagate")
# One CPU thread's chunk: 256 KiB of float32, so a chunk and its temporaries stay in L2.
CPU_CHUNK_ELEMENTS = 1 << 16
ACCELERATOR_CHUNK_ELEMENTS = 1 << 26

_REGISTRY: dict[str, type[Format]] = {}


@dataclass(frozen=True)
class Format(ABC):
    """A number format with its options; instances are immutable.

    Subclasses are dataclasses whose fields are the format's options (every option has a
    default). ``FORMATS[key]`` holds the instance with default options;
    ``configure(**options)`` returns a variant. Sizes, element range and block shape come
    from the format's row in ``labs.quant.spec`` (``spec``); a subclass implements only
    the block-level steps marked abstract below, plus the optional hooks after them.
    """

    nonfinite: str = "raise"

    key: ClassVar[str] = ""
    # Quantize this many times more blocks per chunk on the CPU: formats that run many
    # small ops per chunk (the k-quants' scale search) pay per-op overhead otherwise.
    chunk_factor: ClassVar[float] = 1

    def __init_subclass__(cls, key: str | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if key is not None:
            if key in _REGISTRY:
                raise ValueError(f"format key {key!r} is registered twice")
            if key not in SPECS:
                raise ValueError(f"format key {key!r} has no row in labs.quant.spec")
            cls.key = key
            _REGISTRY[key] = cls

    def __post_init__(self) -> None:
        if self.nonfinite not in NONFINITE_MODES:
            raise ValueError(
                f"{self.key}: nonfinite={self.nonfinite!r} is not one of {list(NONFINITE_MODES)}"
            )

    # --- options -------------------------------------------------------------------------

    @classmethod
    def option_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    def options(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.option_names()}

    def configure(self, **options: Any) -> Format:
        """This format with some options changed; unknown names raise ValueError."""
        unknown = sorted(set(options) - set(self.option_names()))
        if unknown:
            raise ValueError(
                f"{self.key}: unknown option(s) {unknown}; valid options are {self.option_names()}"
            )
        return dataclasses.replace(self, **options) if options else self

    # --- what the spec row says ------------------------------------------------------------

    @property
    def spec(self) -> FormatSpec:
        """This configuration's row of ``labs.quant.spec`` (formats whose options change
        the stored scales override it)."""
        return SPECS[FormatKey(self.key)]

    @property
    def block_size(self) -> int | None:
        """Elements that share one scale, or None when a whole row or tensor does."""
        return self.spec.block_size

    @property
    def bits_per_value(self) -> float:
        """Stored bits per element, element bits plus per-block scales and zero points.

        Per-tensor values (an NVFP4 tensor scale) and per-row scales (``granularity=
        "channel"``) depend on the shape and are left out; ``storage_bytes`` counts them.
        """
        return self.spec.bits_per_value

    def storage_bytes(self, layout: Layout) -> int:
        """Every stored byte for a tensor cut as ``layout``: payload, scales, zero points
        and per-tensor values."""
        return self.spec.storage_bytes(layout.n_rows, layout.row_len)

    def payload_bytes(self, layout: Layout) -> int:
        """Bytes of element codes alone (no scales)."""
        return self.spec.payload_bytes(layout.n_rows, layout.row_len)

    @property
    def element(self) -> str:
        """The element type, for docs and labs: "E2M1", "int4", ..."""
        return self.spec.element

    @property
    def scale_type(self) -> str:
        """The stored scale type with default options ("E8M0", "fp16", ...)."""
        return SPECS[FormatKey(self.key)].scale_type

    @property
    def stored_scale(self) -> str:
        """The scale type this configuration stores (``scale_dtype`` may change it)."""
        return self.spec.scale_type

    @property
    def reference(self) -> str:
        """What the format matches, for docs and labs."""
        return self.spec.reference

    @property
    def layout_kind(self) -> str:
        """Blocks along the last dim ("rows") or over the flattened tensor ("flat")."""
        return "flat" if self.spec.flat else "rows"

    @property
    def scale_scope(self) -> str:
        """Where one scale applies: "tensor", "channel" (one row) or "block"."""
        return self.spec.scale_scope

    def element_range(self) -> tuple[float, float]:
        """The smallest and largest element value the quantizer produces (before scaling)."""
        return float(self.spec.element_min), float(self.spec.element_max)

    def block_len_for(self, row_len: int) -> int:
        """Elements per block (the k-quants' sub-block; the row itself when unblocked)."""
        return self.spec.sub_block_size or self.spec.block_size or row_len

    def layout_for(self, shape: tuple[int, ...]) -> Layout:
        numel = math.prod(shape)
        if self.spec.flat:
            n_rows, row_len = 1, numel
        else:
            row_len = shape[-1] if shape else 1
            n_rows = numel // row_len if row_len else 0
        block_len = self.block_len_for(row_len)
        padded_row_len = -(-row_len // block_len) * block_len
        return Layout(tuple(shape), n_rows, row_len, block_len, padded_row_len)

    # --- what each format implements ----------------------------------------------------

    @abstractmethod
    def block_scales(
        self, stats: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
        """From every block's stats: the stored per-block fields (e.g. ``scale_e8m0``) and
        the per-block parameters ``encode_blocks`` needs (e.g. ``inverse``), all (n_blocks,)."""

    @abstractmethod
    def encode_blocks(
        self,
        x_hp: torch.Tensor,
        params: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        """Codes of (n, block_len) float32 blocks, given their rows of ``params``.
        ``x_hp`` may be a view of the caller's tensor: never modify it in place."""

    @abstractmethod
    def decode_elements(self, codes: torch.Tensor) -> torch.Tensor:
        """Codes to their float32 element values, before any scale (a new tensor)."""

    @abstractmethod
    def decode_scales(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor:
        """The decoded stored scales, float32, 1-D in row-major block order."""

    @abstractmethod
    def pack(
        self,
        codes: torch.Tensor,
        fields: Mapping[str, torch.Tensor],
        tensor: Mapping[str, torch.Tensor],
    ) -> torch.Tensor:
        """The stored bytes as a flat uint8 tensor (see each format for the layout)."""

    # --- optional hooks, with the defaults most formats use --------------------------------

    @property
    def code_dtype(self) -> torch.dtype:
        """The dtype of the unpacked codes (uint8 unless a format stores signed codes)."""
        import torch

        return torch.uint8

    def block_stats(self, x_hp: torch.Tensor) -> dict[str, torch.Tensor]:
        """Per-block float32 reductions of (n, block_len) blocks, each of shape (n,).
        Each must be NaN or Inf when its block holds a non-finite value (the non-finite
        check reads them). Not called when every scale is per tensor. Default:
        ``{"amax": max |x|}``."""
        return {"amax": block_absmax(x_hp)}

    def tensor_fields(
        self, x_blocks: torch.Tensor, stats: Mapping[str, torch.Tensor], layout: Layout
    ) -> dict[str, torch.Tensor]:
        """Per-tensor values (e.g. ``tensor_amax``, which the non-finite check reads, and
        ``tensor_scale_fp32``), from the blocks or from every block's ``stats`` (empty
        when the scale is per tensor), given how the tensor is cut into blocks.
        Default: none."""
        return {}

    def decode_zero_points(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor]
    ) -> torch.Tensor | None:
        """Stored zero points or block minimums, None for symmetric formats."""
        return None

    def scale_offset(
        self, fields: Mapping[str, torch.Tensor], tensor: Mapping[str, torch.Tensor], layout: Layout
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Per block (1-D, n_blocks long): the effective float32 scale and the additive
        offset (None when zero), so that ``value = element * scale + offset``. Default:
        the decoded scales, and the decoded zero points as the offset (a block minimum)."""
        return self.decode_scales(fields, tensor), self.decode_zero_points(fields, tensor)

    def native_quantize(
        self, x_rows: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor], dict[str, torch.Tensor]] | None:
        """A native kernel for the whole quantizer, where the format has one: from the
        padded rows (n_rows, padded_row_len), the codes (n_blocks, block_len), fields and
        tensor fields the torch pipeline below makes, bit for bit. None (the default):
        run the torch pipeline, which stays the reference and covers every device and
        every input a kernel leaves to it."""
        return None

    # --- the shared pipeline --------------------------------------------------------------

    def quantize(self, x: torch.Tensor) -> QuantizedTensor:
        """Quantize ``x`` (any float dtype, any device); blocks run along the last dim."""
        import torch

        if not isinstance(x, torch.Tensor):
            raise TypeError(f"{self.key}: expected a torch.Tensor, got {type(x).__name__}")
        if not x.is_floating_point():
            raise ValueError(f"{self.key}: expected a floating-point tensor, got {x.dtype}")
        if x.numel() == 0:
            raise ValueError(
                f"{self.key}: cannot quantize an empty tensor (shape {tuple(x.shape)})"
            )
        x = x.detach()  # quantization is not differentiable; keep autograd out of it
        layout = self.layout_for(tuple(x.shape))
        x_rows = x.reshape(layout.n_rows, layout.row_len)
        if layout.padded_row_len > layout.row_len:
            pad = layout.padded_row_len - layout.row_len
            x_rows = torch.cat([x_rows, x_rows[:, -1:].expand(-1, pad)], dim=1)
        native = self.native_quantize(x_rows)
        if native is not None:
            return QuantizedTensor(self, layout, x.dtype, *native)
        x_blocks = x_rows.reshape(layout.n_blocks, layout.block_len)

        step = _chunk_blocks(layout.block_len, x.device, self.chunk_factor)
        starts = range(0, layout.n_blocks, step)

        stats: dict[str, torch.Tensor] = {}
        if self.scale_scope != "tensor":

            def chunk_stats(start: int) -> dict[str, torch.Tensor]:
                return self.block_stats(x_blocks[start : start + step].to(torch.float32))

            parts: dict[str, list[torch.Tensor]] = {}
            for chunk_part in _map_chunks(chunk_stats, starts, x.device):
                for name, value in chunk_part.items():
                    parts.setdefault(name, []).append(value)
            stats = {name: _cat(values) for name, values in parts.items()}
        tensor = self.tensor_fields(x_blocks, stats, layout)
        fields, params = self.block_scales(stats, tensor)
        if self.nonfinite == "raise":
            _raise_if_nonfinite(self.key, x, [*stats.values(), *fields.values(), *tensor.values()])

        codes = torch.empty(x_blocks.shape, dtype=self.code_dtype, device=x.device)

        def encode_chunk(start: int) -> None:
            stop = start + step
            chunk = x_blocks[start:stop].to(torch.float32)
            chunk_params = {name: value[start:stop] for name, value in params.items()}
            codes[start:stop] = self.encode_blocks(chunk, chunk_params, tensor)

        _map_chunks(encode_chunk, starts, x.device)
        return QuantizedTensor(self, layout, x.dtype, codes, fields, tensor)

    def dequantize_blocks(
        self, codes: torch.Tensor, scale: torch.Tensor, offset: torch.Tensor | None
    ) -> torch.Tensor:
        """(n, block_len) codes back to float32, given each block's scale and offset."""
        out = self.decode_elements(codes).mul_(scale[:, None])
        if offset is not None:
            out.add_(offset[:, None])
        return out

    def dequantize_all(self, q: QuantizedTensor) -> torch.Tensor:
        """Every block of ``q`` back to float32, ``(n_blocks, block_len)``, chunk by chunk
        (``QuantizedTensor.dequantize`` unblocks it)."""
        import torch

        scale, offset = q.scale_offset()
        out = torch.empty(q.qdata.shape, dtype=torch.float32, device=q.device)
        step = _chunk_blocks(q.layout.block_len, q.device)

        def decode_chunk(start: int) -> None:
            stop = start + step
            out[start:stop] = self.dequantize_blocks(
                q.qdata[start:stop],
                scale[start:stop],
                None if offset is None else offset[start:stop],
            )

        _map_chunks(decode_chunk, range(0, q.layout.n_blocks, step), q.device)
        return out


def _cat(values: list[torch.Tensor]) -> torch.Tensor:
    import torch

    return values[0] if len(values) == 1 else torch.cat(values)


def _chunk_blocks(block_len: int, device: torch.device, cpu_factor: float = 1) -> int:
    """Blocks per chunk: on the CPU one thread's share (``_map_chunks`` runs the chunks
    on as many threads as torch's intra-op setting)."""
    if device.type == "cpu":
        target = int(CPU_CHUNK_ELEMENTS * cpu_factor)
    else:
        target = ACCELERATOR_CHUNK_ELEMENTS
    return max(1, target // max(block_len, 1))


def _map_chunks(fn: Callable[[int], R], starts: range, device: torch.device) -> list[R]:
    """``fn`` over the chunk starts, in order: on the CPU on parallel Python threads
    (labs.quant.parallel), elsewhere in line (asynchronous launches on one stream)."""
    if device.type == "cpu":
        return map_chunks(fn, starts)
    return [fn(start) for start in starts]


def _raise_if_nonfinite(key: str, x: torch.Tensor, values: list[torch.Tensor]) -> None:
    """Raise ValueError naming the first non-finite input, if any of ``values`` (block
    stats and floating-point scales) is not finite."""
    import torch

    floats = [v for v in values if v.is_floating_point()]
    if all(bool(torch.isfinite(v).all()) for v in floats):
        return
    flat = x.reshape(-1)
    bad = torch.nonzero(~torch.isfinite(flat))
    if bad.numel() == 0:
        raise ValueError(
            f"{key}: a block scale is not finite although every input is: the values are "
            f"too large for the format's scale type (see FORMAT_LIMITS[{key!r}])"
        )
    flat_index = int(bad[0, 0])
    index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat_index), x.shape))
    value = float(flat[flat_index])
    raise ValueError(
        f"{key}: non-finite value {value} at index {index}; pass nonfinite='propagate' "
        "to keep the format's own NaN/Inf behaviour"
    )

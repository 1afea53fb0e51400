"""How a tensor is cut into blocks (``Layout``): plain data that the formats
(``labs.quant.core``) compute and a ``QuantizedTensor`` keeps."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Layout:
    """How a tensor of ``shape`` is cut into blocks.

    "rows" formats put blocks along the last dim: the tensor is viewed as ``n_rows`` rows
    of ``row_len``, each padded to ``padded_row_len`` (a multiple of ``block_len``).
    "flat" formats (NF4, like bitsandbytes) cut the flattened tensor: one row of
    ``numel``. Padding repeats the row's last value, which leaves every block statistic
    (absmax, min, max, the first element of largest magnitude) unchanged.
    """

    shape: tuple[int, ...]
    n_rows: int
    row_len: int
    block_len: int
    padded_row_len: int

    @property
    def numel(self) -> int:
        return self.n_rows * self.row_len

    @property
    def stored(self) -> int:
        """Elements actually stored, padding included."""
        return self.n_rows * self.padded_row_len

    @property
    def padded(self) -> int:
        return self.stored - self.numel

    @property
    def n_blocks(self) -> int:
        return self.stored // self.block_len

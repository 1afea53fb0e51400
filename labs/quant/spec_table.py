"""The formats table of README.md and docs/quant.md, rendered from ``labs.quant.spec``.

``python -c "from labs.quant.spec_table import markdown_table; print(markdown_table())"``
prints it; tests/unit/labs/quant/test_spec.py checks both files against it row by row.
"""

from __future__ import annotations

from labs.quant.spec import SPECS, FormatSpec

TABLE_HEADER = (
    "key",
    "block",
    "element [range]",
    "stored scale",
    "bytes per block",
    "bits/value",
    "options",
    "matches",
)


def _block_text(row: FormatSpec) -> str:
    if row.block_size is None:
        return "row" if row.scale_scope == "channel" else "tensor"
    if row.sub_block_size:
        per_block = row.block_size // row.sub_block_size
        return f"{row.block_size} = {per_block} × {row.sub_block_size}"
    return f"{row.block_size} (flattened)" if row.flat else str(row.block_size)


def _bits_text(row: FormatSpec) -> str:
    text = f"{row.bits_per_value:g}"
    if row.scale_scope == "channel":
        text += f" (+{row.scale_bits + row.zero_point_bits} bits per row)"
    if row.tensor_scale_bits:
        text += f" (+{row.tensor_scale_bits} bits per tensor)"
    return text


def table_row(row: FormatSpec) -> tuple[str, ...]:
    """One row of the formats table, the cells in ``TABLE_HEADER`` order."""
    return (
        f"`{row.key}`",
        _block_text(row),
        f"{row.element} [{row.element_min:g}, {row.element_max:g}]",
        row.scale_type,
        f"{row.block_bytes_text} = {row.block_bytes[1]}" if row.block_bytes else "",
        _bits_text(row),
        row.options,
        row.reference,
    )


def markdown_table() -> str:
    """The formats table as Markdown, one line per format (README.md, docs/quant.md)."""
    lines = [TABLE_HEADER, ("---",) * len(TABLE_HEADER), *map(table_row, SPECS.values())]
    return "\n".join("| " + " | ".join(cells) + " |" for cells in lines)

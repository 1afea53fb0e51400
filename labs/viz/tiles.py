"""Headline tiles: the 3–5 numbers a lab run exists to show, rounded for reading,
and the other ways a number is written for a reader (a table cell, a chart's tick).

A lab names its tiles with a small function from its stored result (the JSON the
run keeps, so pages of runs stored long ago still get tiles) to ``Tile``s; the
run page shows them first, each with its exact value one click away. Importing
this module imports no torch: the web process builds the tiles.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field

# Significant digits a tile shows: enough to compare two runs, few enough to read.
READING_DIGITS = 3
# Binary prefixes for byte counts (KiB = 1024 bytes): what memory tools print.
BYTE_UNITS = ("bytes", "KiB", "MiB", "GiB", "TiB")
BYTES_PER_KIB = 1024
MAX_TILES = 5
# Counts (parameters, tokens) of a million and more read with a suffix: 41.9 M, 70.6 B.
COUNT_STEP = 1000
COUNT_SUFFIXES = ("", "k", "M", "B", "T")
# Significant digits a table cell or a chart's tick shows (more than a tile: it is read
# up close, beside its neighbours).
CELL_DIGITS = 6
# A float this far from zero that is a whole number reads as one (a byte count).
LARGEST_EXACT_FLOAT_INT = 2**53
# Integers from here up get thousands separators: 10,000 but 2048.
GROUPED_FROM = 10_000

Result = Mapping[str, Any]
Headline = Callable[[Result], list["Tile"]]


class Tile(BaseModel):
    """One headline number: ``text`` is what the tile shows, ``exact`` its full value."""

    label: str
    text: str = Field(description="The value rounded for reading, with its unit: '20.4 dB'")
    exact: str = Field(description="The exact value with its unit, shown on demand")
    means: str = Field(default="", description="One line on what the number means")
    key: str = Field(default="", description="Where the value sits in the result (a.b.c)")
    tone: str = Field(default="", description="'warn' where the number is a warning sign")
    value: float | None = Field(
        default=None,
        description="The number shown, in ``unit`` (None for words): what a "
        "comparison of two runs subtracts and divides",
    )
    unit: str = ""


def readable(value: float, digits: int = READING_DIGITS) -> str:
    """``value`` to ``digits`` significant digits, without exponent noise for
    everyday magnitudes: 20.43 → '20.4', 4.5 → '4.5', 0.000123 → '1.23×10⁻⁴'."""
    if not math.isfinite(value):
        return str(value)
    if value == 0:
        return "0"
    if float(value).is_integer() and abs(value) < 10**digits:
        return f"{int(value)}"
    exponent = math.floor(math.log10(abs(value)))
    if -3 <= exponent < 6:
        decimals = max(digits - 1 - exponent, 0)
        text = f"{value:,.{decimals}f}"
        return text.rstrip("0").rstrip(".") if "." in text else text
    mantissa, power = f"{value:.{digits - 1}e}".split("e")
    superscript = str(int(power)).translate(str.maketrans("-0123456789", "⁻⁰¹²³⁴⁵⁶⁷⁸⁹"))
    return f"{mantissa.rstrip('0').rstrip('.')}×10{superscript}"


def number_text(v: float) -> str:
    """A number as a table cell (and a chart tick) shows it: whole numbers as integers,
    grouped from 10,000; others to six significant digits, with ``×10ⁿ`` rather than
    e-notation for the very large and the very small."""
    if isinstance(v, float):
        if not math.isfinite(v):
            return str(v)
        if v.is_integer() and abs(v) < LARGEST_EXACT_FLOAT_INT:
            return number_text(int(v))
        if v != 0 and (abs(v) >= 1e6 or abs(v) < 1e-3):  # 1.23×10⁻⁴, never 1.23e-04
            return readable(v, CELL_DIGITS)
        return f"{v:.{CELL_DIGITS}g}"
    return f"{v:,}" if abs(v) >= GROUPED_FROM else str(v)


def readable_bytes(n: float) -> str:
    """A byte count with a binary prefix: 36_864 → '36 KiB', 1.5e9 → '1.4 GiB'."""
    size, unit = float(n), BYTE_UNITS[0]
    for unit in BYTE_UNITS:
        if abs(size) < BYTES_PER_KIB or unit == BYTE_UNITS[-1]:
            break
        size /= BYTES_PER_KIB
    return f"{readable(size)} {unit}" if unit != "bytes" else f"{round(n):,} bytes"


def readable_count(n: int) -> str:
    """A large count the way model cards write it: 41_943_040 → '41.9 M', 7e10 → '70 B'."""
    size, suffix = float(n), ""
    for suffix in COUNT_SUFFIXES:
        if abs(size) < COUNT_STEP or suffix == COUNT_SUFFIXES[-1]:
            break
        size /= COUNT_STEP
    return f"{readable(size)} {suffix}".strip()


def exact_text(value: Any, unit: str = "") -> str:
    """The value as stored (full precision), with its unit."""
    if isinstance(value, bool) or value is None:
        text = "—" if value is None else ("yes" if value else "no")
    elif isinstance(value, int):
        text = f"{value:,}"
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = str(value)
    return f"{text} {unit}".strip()


def tile(
    label: str,
    value: Any,
    unit: str = "",
    *,
    means: str = "",
    key: str = "",
    digits: int = READING_DIGITS,
    tone: str = "",
) -> Tile:
    """A tile for a number (bytes get a binary prefix, '%' hugs its number) or a word."""
    if value is None:
        text = "—"
    elif isinstance(value, bool) or not isinstance(value, int | float):
        text = f"{value} {unit}".strip() if not isinstance(value, bool) else exact_text(value)
    elif unit == "bytes":
        text = readable_bytes(value)
    elif isinstance(value, int) and abs(value) >= COUNT_STEP**2:
        text = f"{readable_count(value)} {unit}".strip()
    elif unit == "%":
        text = f"{readable(float(value), digits)} %"
    else:
        text = f"{readable(float(value), digits)} {unit}".strip()
    number = (
        float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    )
    return Tile(
        label=label,
        text=text,
        exact=exact_text(value, unit),
        means=means,
        key=key,
        tone=tone,
        value=number,
        unit=unit,
    )


def lookup(result: Result, path: str) -> Any:
    """``result['a']['b']`` for ``'a.b'`` (list positions as numbers); KeyError if absent."""
    node: Any = result
    for part in path.split("."):
        node = node[int(part)] if isinstance(node, list) else node[part]
    return node


# Words a snake_case key spells in lower case that a person writes otherwise.
WORDS = {
    "sqnr": "SQNR", "mse": "MSE", "rmse": "RMSE", "db": "dB", "gb": "GB", "gib": "GiB",
    "mib": "MiB", "kv": "KV", "gpu": "GPU", "gpus": "GPUs", "tp": "TP", "cuda": "CUDA",
    "nbytes": "stored bytes", "numel": "values", "oom": "OOM", "rss": "RSS", "pct": "%",
    "nf4": "NF4", "lora": "LoRA", "int8": "int8", "fp8": "fp8",
}  # fmt: skip


def human_label(key: str) -> str:
    """A flattened result key as words: ``metrics.sqnr_db`` → 'metrics › SQNR dB',
    ``first_blocks.0.scale`` → 'first blocks › #1 › scale'."""
    parts = []
    for part in key.split("."):
        if part.isdigit():
            parts.append(f"#{int(part) + 1}")
            continue
        first, *rest = part.split("_")
        text = " ".join([WORDS.get(w, w) for w in (first, *rest)])
        # A sentence starts with a capital, unless its first word is spelled on purpose.
        capital = not parts and first not in WORDS
        parts.append(text[:1].upper() + text[1:] if capital else text)
    return " › ".join(parts)


def from_outputs(result: Result, outputs: Sequence[tuple[str, str]]) -> list[Tile]:
    """The default headline: a lab's ``numeric_outputs`` (the values a learner can
    predict), then its other top-level numbers, up to MAX_TILES."""
    tiles = [
        _output_tile(key, result[key], unit)
        for key, unit in outputs
        if key in result and result[key] is not None
    ]
    if not tiles:
        tiles = [
            tile(human_label(key), v, key=key)
            for key, v in result.items()
            if isinstance(v, int | float) and not isinstance(v, bool)
        ]
    return tiles[:MAX_TILES]


# Unit words a key ends with that the tile's unit already says.
_UNIT_SUFFIXES = (" GB", " GiB", " MiB", " bytes")


def _output_tile(key: str, value: Any, unit: str) -> Tile:
    """A numeric output as a tile: a fraction reads as a percentage, and the label drops
    a unit the value carries ('Weights resident GB' → 'Weights resident')."""
    label = human_label(key)
    for suffix in _UNIT_SUFFIXES:
        if label.endswith(suffix) and unit.startswith(suffix.strip()):
            label = label.removesuffix(suffix)
    if unit == "fraction" and isinstance(value, int | float):
        return tile(label, value * 100, "%", key=key)
    return tile(label, value, unit, key=key)

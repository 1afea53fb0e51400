"""Reading a learner's answer: a number with an optional unit, for quick checks
(``app.content.quiz``, one class per item type, grades them) and predictions in
the notebook. Units convert within their kind, and GB (10^9 bytes) is never
confused with GiB (2^30 bytes)."""

from __future__ import annotations

import math
import re

# Units a learner may type, as (dimension, factor to the dimension's base unit).
UNITS: dict[str, tuple[str, float]] = {
    "b": ("bytes", 1),
    "byte": ("bytes", 1),
    "bytes": ("bytes", 1),
    "kb": ("bytes", 1e3),
    "mb": ("bytes", 1e6),
    "gb": ("bytes", 1e9),
    "tb": ("bytes", 1e12),
    "kib": ("bytes", 2**10),
    "mib": ("bytes", 2**20),
    "gib": ("bytes", 2**30),
    "tib": ("bytes", 2**40),
    "bit": ("bits", 1),
    "bits": ("bits", 1),
    "gb/s": ("bytes/s", 1e9),
    "tb/s": ("bytes/s", 1e12),
    "bytes/s": ("bytes/s", 1),
    "s": ("seconds", 1),
    "ms": ("seconds", 1e-3),
    "us": ("seconds", 1e-6),
    "µs": ("seconds", 1e-6),
    "%": ("percent", 1),
    "db": ("dB", 1),
}
_NUM_RE = re.compile(r"^\s*([-+]?(?:\d[\d,_ ]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*([^\d\s].*)?$")
_MULTIPLIERS = {"k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "b": 1e9, "billion": 1e9}


class AnswerError(ValueError):
    """The answer could not be read; the message tells the learner what to type."""


def parse_number(text: str) -> tuple[float, str | None]:
    """'1.4e11' -> (1.4e11, None); '141 GB' -> (141.0, 'gb'); '1,234.5' -> (1234.5, None)."""
    if len(text) > 60:
        raise AnswerError("That answer is too long for a number (60 characters at most).")
    m = _NUM_RE.match(text.strip().replace("\u2009", " ").replace("×10^", "e").replace("x10^", "e"))
    if not m:
        raise AnswerError("Type a number, optionally with a unit, e.g. 141.1, 1.4e11 or 141 GB.")
    raw = m.group(1).replace(",", "").replace("_", "").replace(" ", "")
    try:
        value = float(raw)
    except ValueError as e:
        raise AnswerError(f"'{m.group(1)}' is not a number.") from e
    if not math.isfinite(value):
        raise AnswerError("The number must be finite.")
    unit = (m.group(2) or "").strip().lower() or None
    return value, unit


def fmt_number(v: float) -> str:
    """1234 -> '1,234'; 0.1234567 -> '0.123457' (six significant digits)."""
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:,.6g}"


def convert(value: float, unit: str | None, want: str) -> tuple[float, list[str]]:
    """``value`` in ``unit`` expressed in ``want``, with notes for the learner (GB vs GiB)."""
    notes: list[str] = []
    want_l = want.lower()
    if unit is None or unit == want_l:
        return value, notes
    if unit in _MULTIPLIERS and want_l in ("", "parameters", "params", "tokens"):
        return value * _MULTIPLIERS[unit], notes
    have, want_u = UNITS.get(unit), UNITS.get(want_l)
    if have is None:
        raise AnswerError(
            f"The unit '{unit}' is not one I know; answer in {want or 'a plain number'}."
        )
    if want_u is None or have[0] != want_u[0]:
        raise AnswerError(f"The answer is asked in {want or 'a plain number'}, not '{unit}'.")
    converted = value * have[1] / want_u[1]
    if {unit, want_l} & {"gb", "gib", "mb", "mib", "tb", "tib", "kb", "kib"} and unit[
        -2:
    ] != want_l[-2:]:
        notes.append(
            f"You answered in {unit.upper().replace('I', 'i')} but the question asks {want}: "
            f"1 GB = 10⁹ bytes while 1 GiB = 2³⁰ bytes ≈ 1.074 GB. Your {fmt_number(value)} {unit} = {fmt_number(converted)} {want}."
        )
    return converted, notes

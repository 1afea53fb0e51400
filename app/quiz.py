"""Grading quick-check items on the server. Answers never reach the page before
the learner submits; numeric answers understand units, and GB (10^9 bytes) is
never confused with GiB (2^30 bytes)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

from app.content import QuizItem

MAX_ANSWER_CHARS = 2000

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


@dataclass
class Grade:
    correct: bool | None  # None: self-graded (free text)
    message: str
    expected: str
    explanation: str
    given: str
    notes: list[str] = field(default_factory=list)


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


def _fmt(v: float) -> str:
    if v == int(v) and abs(v) < 1e15:
        return f"{int(v):,}"
    return f"{v:,.6g}"


def _convert(value: float, unit: str | None, want: str) -> tuple[float, list[str]]:
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
            f"1 GB = 10⁹ bytes while 1 GiB = 2³⁰ bytes ≈ 1.074 GB. Your {_fmt(value)} {unit} = {_fmt(converted)} {want}."
        )
    return converted, notes


def within(value: float, expected: float, item: QuizItem) -> bool:
    tol = item.tolerance
    if item.tolerance_mode == "abs":
        return abs(value - expected) <= tol + 1e-12
    return abs(value - expected) <= max(tol * abs(expected), 1e-9 * max(abs(expected), 1.0))


def expected_text(item: QuizItem) -> str:
    if item.type == "single":
        return item.choices[item.answer]
    if item.type == "multiple":
        return "; ".join(item.choices[i] for i in item.answer)
    if item.type == "ordering":
        return " → ".join(item.choices[i] for i in item.answer)
    if item.type == "numeric":
        tol = ""
        if item.tolerance:
            tol = (
                f" (±{item.tolerance:g} {item.unit})"
                if item.tolerance_mode == "abs"
                else f" (±{item.tolerance * 100:g}%)"
            )
        return f"{_fmt(float(item.answer))} {item.unit or ''}".strip() + tol
    return item.model_answer or ""


def _ints(values: list[str], n: int) -> list[int]:
    out = []
    for v in values:
        try:
            i = int(v)
        except ValueError as e:
            raise AnswerError("That choice is not one of the options.") from e
        if not 0 <= i < n:
            raise AnswerError("That choice is not one of the options.")
        out.append(i)
    return out


def grade(item: QuizItem, form: dict[str, list[str]]) -> Grade:
    """Grade one submission. ``form`` maps field names to their submitted values."""
    answers = [a[:MAX_ANSWER_CHARS] for a in form.get("answer", [])]
    exp = expected_text(item)
    if item.type == "single":
        if len(answers) != 1:
            raise AnswerError("Choose one option.")
        (i,) = _ints(answers, len(item.choices))
        ok = i == item.answer
        return Grade(ok, "Correct." if ok else "Not quite.", exp, item.explanation, item.choices[i])
    if item.type == "multiple":
        if not answers:
            raise AnswerError("Choose at least one option.")
        picked = sorted(set(_ints(answers, len(item.choices))))
        ok = picked == sorted(item.answer)
        return Grade(
            ok,
            "Correct." if ok else "Not quite — check every option.",
            exp,
            item.explanation,
            "; ".join(item.choices[i] for i in picked),
        )
    if item.type == "ordering":
        n = len(item.choices)
        try:
            pos = {i: int(form.get(f"order_{i}", [""])[0]) for i in range(n)}
        except ValueError as e:
            raise AnswerError("Give every item a position number.") from e
        if sorted(pos.values()) != list(range(1, n + 1)):
            raise AnswerError(f"Use each position from 1 to {n} exactly once.")
        order = sorted(range(n), key=lambda i: pos[i])
        ok = order == list(item.answer)
        return Grade(
            ok,
            "Correct order." if ok else "Not quite.",
            exp,
            item.explanation,
            " → ".join(item.choices[i] for i in order),
        )
    if item.type == "numeric":
        if len(answers) != 1 or not answers[0].strip():
            raise AnswerError("Type a number.")
        value, unit = parse_number(answers[0])
        value, notes = _convert(value, unit, item.unit or "")
        ok = within(value, float(item.answer), item)
        return Grade(
            ok,
            "Correct." if ok else "Not within tolerance.",
            exp,
            item.explanation,
            answers[0].strip(),
            notes,
        )
    text = answers[0].strip() if answers else ""
    if not text:
        raise AnswerError("Write one sentence first.")
    return Grade(
        None,
        "Compare with the model answer and grade yourself honestly.",
        exp,
        item.explanation,
        text,
    )


def answer_record(form: dict[str, list[str]]) -> dict[str, Any]:
    return {
        k: [v[:MAX_ANSWER_CHARS] for v in vals][:20]
        for k, vals in form.items()
        if k != "csrf_token"
    }

"""Checks that compare a learner's value with the reference and explain the difference.

Each ``*_check`` returns a ``check(expected, got) -> Verdict`` for a ``Case``:

- ``bytes_check``: packed blocks. A failure names the first differing block, its
  fields (scale, codes) expected vs got, the block's bytes in hex with the differing
  ones marked (``[9b]``; their offsets in ``detail["differing_bytes"]``) and how many
  blocks differ.
- ``tensor_check``: the first element beyond the tolerance, the largest absolute error
  and the tolerance.
- ``number_check``: a number with its unit and relative tolerance.

``mistakes`` maps a likely cause ("rounded half to even; llama.cpp's roundf rounds half
away from zero") to a function that recomputes the reference with that mistake. When the
learner's value matches one (everywhere, or on the first differing block) the message
names it: the cause is recognised by reproducing it, not guessed from the numbers.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from labs.judge.kit import Verdict

Check = Callable[[Any, Any], Verdict]
Mistakes = Mapping[str, Callable[[], Any]]
Describe = Callable[[bytes], dict[str, Any]]
HEX_WINDOW = 24  # bytes of a block shown in the message (all of them are in detail)


def type_name(v: Any) -> str:
    t = type(v)
    return t.__name__ if t.__module__ == "builtins" else f"{t.__module__}.{t.__name__}"


def _likely(mistakes: Mistakes, matches: Callable[[Any], bool]) -> str | None:
    for cause, recompute in mistakes.items():
        try:
            if matches(recompute()):
                return cause
        except Exception:  # noqa: BLE001, S112 - a mistake that cannot be reproduced is not the cause
            continue
    return None


def _with_cause(message: str, cause: str | None, detail: dict[str, Any]) -> Verdict:
    detail["likely_cause"] = cause
    if cause:
        message += f"\nLikely cause: {cause}."
    return Verdict(False, message, detail)


def fp16_text(raw: bytes) -> str:
    """Two little-endian bytes as 'fp16 0xHHHH = value'."""
    return f"0x{int.from_bytes(raw, 'little'):04x} = {struct.unpack('<e', raw)[0]:.6g}"


def q8_0_fields(block: bytes) -> dict[str, Any]:
    """A GGUF Q8_0 block (fp16 d, 32 int8): its scale and codes."""
    return {"d": fp16_text(block[:2]), "codes": list(struct.unpack("<32b", block[2:34]))}


def q4_0_fields(block: bytes) -> dict[str, Any]:
    """A GGUF Q4_0 block (fp16 d, 16 bytes): element j low nibble, j + 16 high nibble."""
    low = [b & 0xF for b in block[2:18]]
    high = [b >> 4 for b in block[2:18]]
    return {"d": fp16_text(block[:2]), "codes": low + high}


def hex_marked(block: bytes, differing: set[int], start: int = 0, stop: int | None = None) -> str:
    stop = len(block) if stop is None else min(stop, len(block))
    return " ".join(
        f"[{block[i]:02x}]" if i in differing else f"{block[i]:02x}" for i in range(start, stop)
    )


def _field_lines(want: dict[str, Any], got: dict[str, Any], first_element: int) -> list[str]:
    lines = []
    for key, value in want.items():
        other = got.get(key)
        if value == other:
            continue
        if isinstance(value, list) and isinstance(other, list):
            i = next((k for k in range(min(len(value), len(other))) if value[k] != other[k]), 0)
            lines.append(
                f"  {key}: element {first_element + i}: expected {value[i]}, got {other[i]}"
            )
        else:
            lines.append(f"  {key}: expected {value}, got {other}")
    return lines


def _first_block_difference(
    expected: bytes, got: bytes, block_bytes: int, block_values: int, describe: Describe | None
) -> tuple[int, list[str], dict[str, Any]]:
    """(first differing block, message lines, detail) for two byte strings of one length."""
    blocks = len(expected) // block_bytes
    first = next(i for i in range(len(expected)) if expected[i] != got[i])
    b = first // block_bytes
    lo = b * block_bytes
    want, have = expected[lo : lo + block_bytes], got[lo : lo + block_bytes]
    differing = {i for i in range(block_bytes) if want[i] != have[i]}
    bad_blocks = sum(
        expected[k * block_bytes : (k + 1) * block_bytes]
        != got[k * block_bytes : (k + 1) * block_bytes]
        for k in range(blocks)
    )
    detail: dict[str, Any] = {
        "block": b,
        "differing_blocks": bad_blocks,
        "first_byte": first,
        "differing_bytes": sorted(differing),
        "expected_hex": want.hex(" "),
        "got_hex": have.hex(" "),
    }
    lines = [
        f"{bad_blocks} of {blocks} blocks differ; the first is block {b} "
        f"(values {b * block_values}–{(b + 1) * block_values - 1}, bytes {lo}–{lo + block_bytes - 1})."
    ]
    if describe:
        want_f, have_f = describe(want), describe(have)
        detail |= {"expected_fields": want_f, "got_fields": have_f}
        lines += _field_lines(want_f, have_f, b * block_values)
    start = (min(differing) // 8) * 8
    stop = start + HEX_WINDOW
    lines.append(
        f"  bytes {start}–{min(stop, block_bytes) - 1} of the block, differing ones in [ ]:"
    )
    lines.append(f"    expected {hex_marked(want, differing, start, stop)}")
    lines.append(f"    got      {hex_marked(have, differing, start, stop)}")
    return b, lines, detail


def bytes_check(
    *,
    block_bytes: int,
    block_values: int,
    describe: Describe | None = None,
    mistakes: Mistakes | None = None,
) -> Check:
    """Packed blocks of ``block_bytes`` bytes, each holding ``block_values`` values."""
    mistakes = mistakes or {}

    def check(expected: bytes, got: Any) -> Verdict:
        if isinstance(got, bytearray | memoryview):
            got = bytes(got)
        if not isinstance(got, bytes):
            return Verdict(False, f"expected bytes, got a {type_name(got)}", {"likely_cause": None})
        blocks = len(expected) // block_bytes
        if got == expected:
            message = f"{blocks} blocks ({len(expected)} bytes), bit-exact"
            return Verdict(True, message, {"blocks": blocks})
        detail: dict[str, Any] = {
            "blocks": blocks,
            "expected_bytes": len(expected),
            "got_bytes": len(got),
        }
        if len(got) != len(expected):
            message = (
                f"expected {len(expected)} bytes ({blocks} blocks of {block_bytes}), got {len(got)}"
            )
            return _with_cause(message, _likely(mistakes, lambda m: m == got), detail)
        b, lines, more = _first_block_difference(expected, got, block_bytes, block_values, describe)
        detail |= more
        lo, hi = b * block_bytes, (b + 1) * block_bytes

        def matches(m: Any) -> bool:  # the mistake everywhere, or on the first differing block
            return (
                isinstance(m, bytes) and len(m) == len(got) and (m == got or m[lo:hi] == got[lo:hi])
            )

        return _with_cause("\n".join(lines), _likely(mistakes, matches), detail)

    return check


def _fmt(v: float) -> str:
    return f"{v:.9g}"


def tensor_check(
    *, atol: float = 0.0, rtol: float = 0.0, mistakes: Mistakes | None = None, what: str = "tensor"
) -> Check:
    """A tensor of the reference's dtype and shape, within ``atol + rtol·|expected|`` (0: exact)."""
    mistakes = mistakes or {}

    def check(expected: Any, got: Any) -> Verdict:
        import torch

        if not isinstance(got, torch.Tensor):
            return Verdict(
                False,
                f"expected a torch.Tensor ({what}), got a {type_name(got)}",
                {"likely_cause": None},
            )
        if got.dtype != expected.dtype:
            return Verdict(
                False, f"expected dtype {expected.dtype}, got {got.dtype}", {"likely_cause": None}
            )
        if got.shape != expected.shape:
            msg = f"expected shape {tuple(expected.shape)}, got {tuple(got.shape)}"
            return Verdict(False, msg, {"likely_cause": None})
        bad, err = _beyond(expected, got, atol, rtol)
        tol = "exact" if atol == rtol == 0 else f"atol {atol:g} + rtol {rtol:g}·|expected|"
        detail: dict[str, Any] = {
            "max_abs_error": err,
            "tolerance": tol,
            "elements": expected.numel(),
        }
        if not bool(bad.any()):
            return Verdict(
                True, f"{expected.numel()} values match ({tol}); max |error| {err:.3g}", detail
            )
        flat = int(bad.reshape(-1).nonzero()[0])
        index = (
            tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), expected.shape))
            if expected.dim()
            else ()
        )
        e_v, g_v = expected.reshape(-1)[flat].item(), got.reshape(-1)[flat].item()
        detail |= {"index": list(index), "expected": e_v, "got": g_v, "differing": int(bad.sum())}
        message = (
            f"{int(bad.sum())} of {expected.numel()} values differ ({tol}); the first is at index "
            f"{list(index)}: expected {_fmt(e_v)}, got {_fmt(g_v)}. Max |error| {err:.3g}."
        )

        def matches(m: Any) -> bool:
            return (
                isinstance(m, torch.Tensor)
                and m.shape == got.shape
                and not bool(_beyond(m, got, atol, rtol)[0].any())
            )

        return _with_cause(message, _likely(mistakes, matches), detail)

    return check


def _beyond(expected: Any, got: Any, atol: float, rtol: float) -> tuple[Any, float]:
    """(mask of elements outside the tolerance, max |error|); NaN matches only NaN."""
    import torch

    e, g = expected.double(), got.double()
    diff = (g - e).abs()
    nan_e, nan_g = torch.isnan(e), torch.isnan(g)
    same_inf = torch.isinf(e) & (e == g)
    bad = (
        (diff > atol + rtol * e.abs()) | (nan_e != nan_g) | (torch.isnan(diff) & ~nan_e & ~same_inf)
    )
    bad &= ~(nan_e & nan_g) & ~same_inf
    finite = diff[torch.isfinite(diff)]
    return bad, float(finite.max()) if finite.numel() else 0.0


def number_check(
    *, rel_tol: float = 0.0, unit: str = "", mistakes: Mistakes | None = None
) -> Check:
    """One int or float; exact unless ``rel_tol`` > 0."""
    mistakes = mistakes or {}

    def close(a: float, b: float) -> bool:
        return a == b if rel_tol == 0 else math.isclose(a, b, rel_tol=rel_tol)

    def check(expected: float, got: Any) -> Verdict:
        if isinstance(got, bool) or not isinstance(got, int | float):
            return Verdict(
                False, f"expected a number, got a {type_name(got)}", {"likely_cause": None}
            )
        tol = "exact" if rel_tol == 0 else f"within {rel_tol:.1%}"
        detail: dict[str, Any] = {"expected": expected, "got": got, "tolerance": tol}
        if math.isfinite(got) and close(got, expected):
            return Verdict(True, f"{got:,.6g}{' ' + unit if unit else ''} ({tol})", detail)
        ratio = f" ({got / expected:.3g}× the reference)" if expected and math.isfinite(got) else ""
        u = f" {unit}" if unit else ""
        message = f"expected {expected:,.6g}{u}, got {got:,.6g}{u}{ratio} ({tol})"
        return _with_cause(
            message, _likely(mistakes, lambda m: close(float(got), float(m))), detail
        )

    return check


def tuple_check(parts: Sequence[tuple[str, Check]], *, mistakes: Mistakes | None = None) -> Check:
    """A tuple whose items are judged by their own checks, named in the messages.

    A mistake gives the whole tuple; it is the likely cause when every item of the
    learner's tuple passes its check against it."""
    mistakes = mistakes or {}
    names = ", ".join(name for name, _ in parts)

    def judge_all(expected: Any, got: tuple[Any, ...]) -> list[tuple[str, Verdict]]:
        return [(name, c(e, g)) for (name, c), e, g in zip(parts, expected, got, strict=True)]

    def check(expected: Any, got: Any) -> Verdict:
        if isinstance(got, list):
            got = tuple(got)
        if not isinstance(got, tuple) or len(got) != len(parts):
            what = f"a {type_name(got)}" + (f" of {len(got)}" if isinstance(got, tuple) else "")
            msg = f"expected a tuple of {len(parts)} ({names}), got {what}"
            return Verdict(False, msg, {"likely_cause": None})
        verdicts = judge_all(expected, got)
        detail: dict[str, Any] = {name: v.detail for name, v in verdicts}
        failed = [(name, v) for name, v in verdicts if not v.passed]
        if not failed:
            return Verdict(True, "; ".join(f"{name}: {v.message}" for name, v in verdicts), detail)
        message = "\n".join(f"{name}: {v.message}" for name, v in failed)

        def matches(m: Any) -> bool:
            return all(v.passed for _, v in judge_all(m, got))

        return _with_cause(message, _likely(mistakes, matches), detail)

    return check

"""Cases for q4_k-scale-search: graded against labs.quant's q4_k bytes (bit-exact with
llama.cpp's quantize_row_q4_K_ref, checked there against the C reference's digests).

Likely causes are recognised by running the reference solution with one mistake put in
(a textual change of solution.py, checked by the unit tests that fail without it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from labs.judge.compare import bytes_check
from labs.judge.exercise_inputs import generator, normal
from labs.judge.kit import Case
from labs.quant import quantize

SOLUTION = (Path(__file__).parent / "solution.py").read_text(encoding="utf-8")
EDITS = {
    "no search: only the first guess 15 / (max - min) was kept; try the 21 candidate "
    "scales (14 + 0.1·step) / (max - min) and keep the best": ("nstep=20)", "nstep=-1)"),
    "min was not clamped to 0: the range always includes 0, min = min(x, 0)": (
        "lo = lo.clamp(max=0)",
        "lo = lo",
    ),
    "the min was not updated during the search: later candidates must use the best min so "
    "far in (x - min) and (max - min)": (
        "        lo = torch.where(better, this_min, lo)\n",
        "        lo_best = torch.where(better, this_min, locals().get('lo_best', lo))\n",
    ),
}


def _variant(old: str, new: str) -> Any:
    assert old in SOLUTION, f"q4_k tests: {old!r} is no longer in solution.py"
    namespace: dict[str, Any] = {}
    source = SOLUTION.replace(old, new)
    if "lo_best" in new:
        source = source.replace("    return scale, -lo, L\n", "    return scale, -lo_best, L\n")
    exec(compile(source, "q4_k-variant", "exec"), namespace)  # noqa: S102 - our own solution
    return namespace["quantize"]


def _sub_block_desc(block: bytes) -> dict[str, Any]:
    import struct

    return {
        "d": f"0x{int.from_bytes(block[0:2], 'little'):04x} = {struct.unpack('<e', block[0:2])[0]:.6g}",
        "dmin": f"0x{int.from_bytes(block[2:4], 'little'):04x} = {struct.unpack('<e', block[2:4])[0]:.6g}",
        "packed 6-bit scales and mins": list(block[4:16]),
    }


def _case(name: str, x: torch.Tensor, example: bool = False) -> Case:
    mistakes = {cause: (lambda e=edit: _variant(*e)(x)) for cause, edit in EDITS.items()}
    check = bytes_check(
        block_bytes=144, block_values=256, describe=_sub_block_desc, mistakes=mistakes
    )
    return Case(name, (x,), lambda: quantize(x, "q4_k").to_bytes(), check, example=example)


def cases() -> list[Case]:
    g = generator(140)
    flat = torch.cat([torch.full((32,), 0.25), normal(141, 224)])
    return [
        _case("one super-block of normal values", normal(142, 256), example=True),
        _case("two super-blocks, normal", normal(143, 512), example=True),
        _case("eight super-blocks, normal", normal(144, 2048)),
        _case("outliers: a few values 30× the rest", normal(145, 1024, outliers=30.0)),
        _case("all positive: min stays 0", torch.rand(512, generator=g) + 0.1),
        _case("a flat sub-block (all 0.25)", flat),
    ]

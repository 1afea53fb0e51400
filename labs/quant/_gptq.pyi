"""Types of GPTQ's native column loop (labs/quant/_gptq.c)."""

from typing import Any

SYMMETRIC: int
SHIFTED: int
TABLE: int

def columns(
    w: Any,
    q: Any,
    e: Any,
    hinv: Any,
    k: int,
    out: int,
    a: int,
    b: int,
    scale: Any,
    offset: Any,
    inv: Any,
    mode: int,
    lo: float,
    hi: float,
    table: Any,
    /,
) -> None: ...

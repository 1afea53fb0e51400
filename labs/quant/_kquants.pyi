"""Types of the native q4_k/q6_k quantizer (labs/quant/_kquants.c)."""

from typing import Any

OK: int
NONFINITE: int
FP16_OVERFLOW: int

def q4_k(
    x: Any, n_rows: int, row_len: int, codes: Any, d: Any, dmin: Any, ls: Any, lm: Any, /
) -> int: ...
def q6_k(x: Any, n_rows: int, row_len: int, codes: Any, d: Any, sc: Any, /) -> int: ...

"""What this CPU computes natively, from ``/proc/cpuinfo`` (no torch): read by the AWQ
search (``labs.quant.awq.search_dtype``) and reported by the torch-env lab, so both
answer "does it multiply bfloat16 natively" the same way."""

from __future__ import annotations

from functools import cache

# /proc/cpuinfo flags that mean a CPU computes in bf16 natively.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpu_flags() -> frozenset[str]:
    """The first processor's flags (empty where ``/proc/cpuinfo`` cannot be read)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("flags"):
                    return frozenset(line.split(":", 1)[1].split())
    except OSError:
        pass
    return frozenset()


def bf16_native() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX-BF16)."""
    return any(f in cpu_flags() for f in CPU_BF16_FLAGS)

"""This CPU as ``/proc/cpuinfo`` describes it (no torch), read in one place: what it
computes natively (the AWQ search's ``search_dtype`` and the torch-env lab answer "does
it multiply bfloat16 natively" the same way) and its name (the worker's heartbeat, the
model-lab benchmark)."""

from __future__ import annotations

from functools import cache

# /proc/cpuinfo flags that mean a CPU computes in bf16 natively.
CPU_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


@cache
def cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` ("model name", "cpu family",
    "model", "flags", …); empty where it cannot be read."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first processor's block ends at the first blank line
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_flags() -> frozenset[str]:
    """The first processor's flags (empty where ``/proc/cpuinfo`` cannot be read)."""
    return frozenset(cpuinfo().get("flags", "").split())


def bf16_native() -> bool:
    """Whether this CPU multiplies bfloat16 natively (AVX-512 BF16 or AMX-BF16)."""
    return any(f in cpu_flags() for f in CPU_BF16_FLAGS)

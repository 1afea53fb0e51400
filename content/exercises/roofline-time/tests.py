"""Cases for roofline-time: graded against labs.catalog.facts.kernels (roofline_seconds of the
GPU registry's datasheet figures, gemm_traffic with one tile covering C: each matrix once)."""

from __future__ import annotations

from labs.catalog.facts.kernels import gemm_traffic, roofline_seconds
from labs.catalog.gpus import GPUS
from labs.judge.compare import number_check
from labs.judge.kit import Case

BYTES = {"bf16": 2, "fp8": 1}


def _gpu(gpu: str, dtype: str) -> dict:
    spec = GPUS[gpu]
    return {
        "name": gpu,
        "peak_tflops": spec.dense_tflops[dtype],
        "bandwidth_tb_s": spec.bandwidth_bytes_per_s / 1e12,
    }


def _reference(gpu: str, dtype: str, m: int, n: int, k: int) -> float:
    traffic = gemm_traffic(m, n, k, m, n, BYTES[dtype])
    return roofline_seconds(gpu, 2 * m * n * k, traffic, dtype)


def _mistaken(m, n, k, bpv, g, *, summed=False, one_flop=False, binary=False, no_c=False):
    flops = (1 if one_flop else 2) * m * n * k
    bytes_moved = (m * k + k * n + (0 if no_c else m * n)) * bpv
    compute = flops / (g["peak_tflops"] * 1e12)
    memory = bytes_moved / (g["bandwidth_tb_s"] * (2**40 if binary else 1e12))
    return compute + memory if summed else max(compute, memory)


MISTAKES = {
    "the compute and memory times were added; they overlap, so the bound is the larger one": {
        "summed": True
    },
    "m·n·k FLOPs; each multiply-add is 2 FLOPs, so a matmul is 2·m·n·k": {"one_flop": True},
    "TB/s taken as 2^40 bytes/s; datasheet bandwidth is decimal, 1 TB/s = 1e12 bytes/s": {
        "binary": True
    },
    "the output C was left out of the bytes: it is written once, m·n values": {"no_c": True},
}


def _case(gpu: str, dtype: str, m: int, n: int, k: int, example: bool = False) -> Case:
    g, bpv = _gpu(gpu, dtype), BYTES[dtype]
    mistakes = {
        cause: (lambda kw=kw: _mistaken(m, n, k, bpv, g, **kw)) for cause, kw in MISTAKES.items()
    }
    check = number_check(rel_tol=1e-9, unit="s", mistakes=mistakes)
    name = f"{gpu}, {dtype}: {m} × {k} times {k} × {n}"
    return Case(
        name, (m, n, k, bpv, g), lambda: _reference(gpu, dtype, m, n, k), check, example=example
    )


def cases() -> list[Case]:
    return [
        _case("h100", "bf16", 1, 4096, 4096, example=True),
        _case("h100", "bf16", 4096, 4096, 4096, example=True),
        _case("h100", "fp8", 16, 14336, 4096),
        _case("h200", "bf16", 1, 128256, 4096),
        _case("a100-80gb", "bf16", 512, 4096, 4096),
        _case("l4", "fp8", 8192, 8192, 8192),
        _case("l4", "bf16", 64, 4096, 14336),
    ]

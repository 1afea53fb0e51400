"""labs.catalog.facts.kernels: the facts behind the CUDA-core cards and the kernel-writing lessons
(issue 23): per-SM limits and SM counts, rooflines (fp32 on the CUDA cores too), GEMM tile
traffic and waves, PCIe transfers, MIG slices, model shapes, MMA accumulator registers."""

from __future__ import annotations

import math

import pytest

from labs.catalog import facts
from labs.catalog.facts import claims
from labs.catalog.facts import kernels as facts_kernels
from labs.catalog.gpus import GPUS, SM_COUNT

KIB = 1024


def test_every_registry_gpu_has_sm_limits_and_a_count():
    for gpu_id, gpu in GPUS.items():
        assert gpu.compute_capability in claims.SM_LIMITS, gpu_id
        assert SM_COUNT[gpu_id] > 0


@pytest.mark.parametrize(
    ("gpu", "what", "value"),
    [
        # CUDA C++ Programming Guide, Tables 30-31: per-SM and opt-in per-block shared memory.
        ("a100-80gb", "shared_memory_bytes", 164 * KIB),
        ("a100-80gb", "shared_memory_per_block_bytes", 163 * KIB),
        ("h100", "shared_memory_per_block_bytes", 232_448),  # Triton's "Hardware limit"
        ("l4", "shared_memory_per_block_bytes", 99 * KIB),
        ("t4", "shared_memory_per_block_bytes", 64 * KIB),
        ("l40s", "max_warps", 48),
        ("t4", "max_threads", 1024),
        ("b200", "max_blocks", 32),
        ("h200", "registers", 65_536),
        ("h100", "sm_count", 132),
        ("b200", "sm_count", 148),
    ],
)
def test_sm_limits_follow_the_programming_guide(gpu, what, value):
    assert facts.evaluate("gpu_sm_limit", {"gpu": gpu, "what": what}) == value


def test_per_block_shared_memory_is_the_per_sm_carveout_less_the_reservation():
    limit = facts.evaluate
    for gpu_id in GPUS:
        per_sm = limit("gpu_sm_limit", {"gpu": gpu_id, "what": "shared_memory_bytes"})
        per_block = limit("gpu_sm_limit", {"gpu": gpu_id, "what": "shared_memory_per_block_bytes"})
        reserved = limit(
            "gpu_sm_limit", {"gpu": gpu_id, "what": "reserved_shared_memory_per_block_bytes"}
        )
        assert per_block == per_sm - reserved, gpu_id


def test_unknown_limits_are_refused():
    with pytest.raises(KeyError, match="SM limit"):
        facts.evaluate("gpu_sm_limit", {"gpu": "h100", "what": "l2_bytes"})


def test_fp32_peak_is_the_cuda_cores_and_the_ridge_follows():
    spec = {"device": "a100-80gb", "what": "peak_flops"}
    assert facts.evaluate("accelerator_spec", {**spec, "dtype": "fp32"}) == 19.5e12
    assert facts.evaluate("accelerator_spec", {**spec, "dtype": "bf16"}) == 312e12
    ridge = facts.evaluate("accelerator_spec", {**spec, "what": "ridge", "dtype": "fp32"})
    assert ridge == pytest.approx(19.5 / 2.039)
    with pytest.raises(KeyError, match="fp32"):
        facts.evaluate(
            "accelerator_spec", {"device": "b200", "what": "peak_flops", "dtype": "fp32"}
        )
    with pytest.raises(KeyError, match="bf16"):
        facts.evaluate("accelerator_spec", {"device": "t4", "what": "peak_flops", "dtype": "bf16"})


def test_roofline_takes_the_larger_of_compute_and_memory_time():
    # A sum over 2^28 floats: 1 GiB read, 2^28 adds → memory-bound almost 40×.
    args = {"gpu": "a100-80gb", "flops": 2**28, "bytes_moved": 2**30, "dtype": "fp32"}
    memory = facts_kernels.roofline_seconds(**args, part="memory")
    compute = facts_kernels.roofline_seconds(**args, part="compute")
    assert memory == pytest.approx(2**30 / 2.039e12)
    assert compute == pytest.approx(2**28 / 19.5e12)
    assert facts_kernels.roofline_seconds(**args) == memory > 30 * compute
    # a pure copy needs no peak: a T4 (no bf16 tensor cores) still gets its memory time
    assert facts_kernels.roofline_seconds("t4", 0, 2**30) == pytest.approx(2**30 / 0.32e12)


def test_gemm_traffic_falls_with_tile_size():
    n = 4096
    naive = facts_kernels.gemm_traffic(n, n, n, 1, 1, bytes_per_element=4)
    assert naive == 2 * n**3 * 4 + n * n * 4
    # A T × T tile reads 2·T·K values per T² outputs: intensity ≈ T/4 FLOP/byte in fp32.
    for tile in (16, 32, 64, 128):
        got = facts_kernels.gemm_traffic(n, n, n, tile, tile, bytes_per_element=4, what="intensity")
        assert got == pytest.approx(tile / 4, rel=0.02)
    assert facts_kernels.gemm_traffic(n, n, n, 128, 256, what="tiles") == 32 * 16
    # Ragged edges round up: a 1000-wide matrix needs 8 tiles of 128.
    assert facts_kernels.gemm_traffic(1000, 128, 64, 128, 128, what="tiles") == 8


def test_waves_expose_the_partial_last_wave():
    assert facts_kernels.gemm_waves("h100", 1536, 1536, 128, 128, what="tiles") == 144
    assert facts_kernels.gemm_waves("h100", 1536, 1536, 128, 128) == pytest.approx(144 / 132)
    assert facts_kernels.gemm_waves(
        "h100", 1536, 1536, 128, 128, what="efficiency"
    ) == pytest.approx(144 / 264)
    # 132 tiles exactly: one full wave.
    assert facts_kernels.gemm_waves("h100", 128 * 12, 128 * 11, 128, 128, what="efficiency") == 1


def test_pcie_bandwidth_per_direction():
    assert facts_kernels.pcie_bandwidth(4) == pytest.approx(31.5e9, rel=1e-3)
    assert facts_kernels.pcie_bandwidth(5) == pytest.approx(2 * facts_kernels.pcie_bandwidth(4))
    assert facts_kernels.pcie_bandwidth(3, lanes=8) == pytest.approx(7.88e9, rel=1e-3)
    with pytest.raises(KeyError, match="generation"):
        facts_kernels.pcie_bandwidth(2)
    # Llama 3.1 8B's bf16 weights (16.06 GB) cross a Gen4 x16 link in about half a second.
    weights = facts.weight_bytes("llama-3.1-8b", "bf16")
    assert facts_kernels.pcie_seconds(weights, 4) == pytest.approx(0.5097, rel=1e-3)
    assert facts_kernels.pcie_seconds(weights, 5) == pytest.approx(
        facts_kernels.pcie_seconds(weights, 4) / 2
    )


def test_mig_profiles_take_more_memory_slices_than_compute_at_3g():
    slices = {
        p: (facts_kernels.mig_slices(p, "compute"), facts_kernels.mig_slices(p, "memory"))
        for p in ("1g", "2g", "3g", "4g", "7g")
    }
    assert slices == {"1g": (1, 1), "2g": (2, 2), "3g": (3, 4), "4g": (4, 4), "7g": (7, 8)}
    # Two 3g instances take all 8 memory slices and leave one compute slice stranded.
    assert 8 - 2 * slices["3g"][1] == 0 and 7 - 2 * slices["3g"][0] == 1
    with pytest.raises(KeyError, match="profile"):
        facts_kernels.mig_slices("5g", "compute")


def test_model_dims_and_accumulator_registers():
    assert facts_kernels.model_dim("llama-3.1-8b", "vocab_size") == 128_256
    assert facts_kernels.model_dim("llama-3.1-70b", "hidden_size") == 8192
    with pytest.raises(KeyError, match="field"):
        facts_kernels.model_dim("llama-3.1-8b", "rope_theta")
    assert facts_kernels.mma_accumulator_registers(64, 256, 128) == 128
    assert facts_kernels.mma_accumulator_registers(16, 8, 32) == 4


def test_every_kernel_fact_is_reachable_through_evaluate():
    for name in ("gpu_sm_limit", "roofline_seconds", "gemm_waves", "mig_slices", "pcie_seconds"):
        assert name in facts.FACTS
    assert facts.evaluate("gpu_sm_limit", {"gpu": "l4", "what": "sm_count"}) == 58
    assert math.isclose(
        facts.evaluate("model_dim", {"model": "qwen2.5-7b", "field": "num_layers"}), 28
    )

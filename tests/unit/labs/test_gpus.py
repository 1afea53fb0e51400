"""GPU registry: datasheet figures, GB vs GiB, tensor-core types."""

from __future__ import annotations

from typing import get_args

import pytest

from labs.catalog.gpus import GPUS, GpuId, get_gpu


def test_registry_ids_match_the_literal_used_by_lab_params():
    assert set(get_args(GpuId)) == set(GPUS)


@pytest.mark.parametrize("gpu_id", sorted(GPUS))
def test_every_gpu_cites_a_vendor_source(gpu_id):
    g = GPUS[gpu_id]
    assert g.source_url.startswith(("https://www.nvidia.com/", "https://images.nvidia.com/"))
    assert set(g.dense_tflops) <= {"tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4"}
    # The driver reports the binary capacity: never less than 95% of the decimal label.
    assert g.visible_memory_bytes > 0.95 * g.memory_bytes


@pytest.mark.parametrize(
    ("gpu_id", "gb", "tb_s", "cc"),
    [
        ("v100", 32, 0.9, 7.0),
        ("t4", 16, 0.32, 7.5),
        ("a100-40gb", 40, 1.555, 8.0),
        ("a100-80gb", 80, 2.039, 8.0),
        ("l4", 24, 0.3, 8.9),
        ("l40s", 48, 0.864, 8.9),
        ("rtx-4090", 24, 1.008, 8.9),
        ("h100", 80, 3.35, 9.0),
        ("h200", 141, 4.8, 9.0),
        ("b200", 180, 7.7, 10.0),
    ],
)
def test_datasheet_figures(gpu_id, gb, tb_s, cc):
    g = get_gpu(gpu_id)
    assert g.memory_bytes == gb * 10**9
    assert g.bandwidth_bytes_per_s == pytest.approx(tb_s * 1e12)
    assert g.compute_capability == cc


def test_gb_versus_gib_on_the_h100():
    h100 = get_gpu("h100")
    assert h100.memory_bytes == 80_000_000_000
    assert h100.visible_memory_bytes == 81_559 * 2**20 == 85_520_809_984


def test_tensor_core_types_by_generation():
    assert not get_gpu("v100").supports("bf16")
    assert not get_gpu("t4").supports("bf16") and get_gpu("t4").supports("int4")
    assert get_gpu("a100-80gb").supports("bf16") and not get_gpu("a100-80gb").supports("fp8_e4m3")
    assert get_gpu("l4").supports("fp8_e4m3") and not get_gpu("l4").supports("nvfp4")
    assert get_gpu("h100").supports("fp8_e5m2") and not get_gpu("h100").supports("int4")
    assert all(get_gpu("b200").supports(t) for t in ("nvfp4", "mxfp4", "mxfp6", "mxfp8", "fp6"))
    assert get_gpu("h100").dense_tflops["bf16"] * 2 == get_gpu("h100").dense_tflops["fp8"]


def test_unknown_gpu_names_the_known_ones():
    with pytest.raises(KeyError, match="h100"):
        get_gpu("h800")

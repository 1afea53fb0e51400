"""GPU registry: datasheet figures, GB vs GiB, tensor-core types."""

from __future__ import annotations

from typing import get_args

import pytest

from labs.catalog.formats import TensorType
from labs.catalog.gpus import GPUS, GpuId, get_gpu, match_smi_name


def test_registry_ids_match_the_literal_used_by_lab_params():
    assert set(get_args(GpuId)) == set(GPUS)


@pytest.mark.parametrize("gpu_id", sorted(GPUS))
def test_every_gpu_cites_a_vendor_source(gpu_id):
    g = GPUS[gpu_id]
    assert g.source_url.startswith(("https://www.nvidia.com/", "https://images.nvidia.com/"))
    assert set(g.dense_tflops) <= {"tf32", "bf16", "fp16", "fp8", "fp6", "fp4", "int8", "int4"}
    # The driver reports the binary capacity: never less than 95% of the decimal label.
    assert g.visible_memory_bytes > 0.95 * g.memory_bytes


# One row per GPU of the registry (a new GPU adds its row here): the datasheet's memory,
# bandwidth and compute capability, and the name and memory.total nvidia-smi prints.
DATASHEET = [
    ("v100", 32, 0.9, 7.0, "Tesla V100-SXM2-32GB", 32768),
    ("t4", 16, 0.32, 7.5, "Tesla T4", 15360),
    ("a100-40gb", 40, 1.555, 8.0, "NVIDIA A100-SXM4-40GB", 40960),
    ("a100-80gb", 80, 2.039, 8.0, "NVIDIA A100-SXM4-80GB", 81920),
    ("l4", 24, 0.3, 8.9, "NVIDIA L4", 23034),
    ("l40s", 48, 0.864, 8.9, "NVIDIA L40S", 46068),
    ("rtx-4090", 24, 1.008, 8.9, "NVIDIA GeForce RTX 4090", 24564),
    ("h100", 80, 3.35, 9.0, "NVIDIA H100 80GB HBM3", 81559),
    ("h200", 141, 4.8, 9.0, "NVIDIA H200", 143771),
    ("b200", 180, 7.7, 10.0, "NVIDIA B200", 183359),
]


def test_every_gpu_has_its_datasheet_row():
    assert [row[0] for row in DATASHEET] == list(GPUS)


@pytest.mark.parametrize(("gpu_id", "gb", "tb_s", "cc"), [row[:4] for row in DATASHEET])
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


@pytest.mark.parametrize(("gpu_id", "smi_name", "smi_mib"), [(r[0], r[4], r[5]) for r in DATASHEET])
def test_the_name_nvidia_smi_prints_finds_the_row(gpu_id, smi_name, smi_mib):
    g = get_gpu(gpu_id)
    assert g.nvidia_smi_mib == smi_mib
    assert match_smi_name(smi_name, smi_mib) == gpu_id


def test_an_unknown_or_sizeless_name_finds_no_row_or_the_smallest_part():
    assert match_smi_name("NVIDIA RTX A6000", 49140) is None
    assert match_smi_name("NVIDIA A100-PCIE", None) == "a100-40gb"


@pytest.mark.parametrize("gpu_id", list(GPUS))
def test_every_gpu_lists_known_tensor_types_and_its_cores(gpu_id):
    g = get_gpu(gpu_id)
    assert set(g.tensor_types) <= set(get_args(TensorType))
    assert g.sm_count > 0 and g.arch.sm <= round(g.compute_capability * 10)

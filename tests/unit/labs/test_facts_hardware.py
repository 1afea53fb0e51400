"""labs.catalog.facts.hardware: MI300X and Apple rows, FNUZ FP8 through torch, MLX's formats."""

from __future__ import annotations

import math

import pytest
import torch

from labs.catalog import facts
from labs.catalog.facts.hardware import ACCELERATORS
from labs.catalog.models import get_model, tensor_groups


def ev(fn: str, **args: object) -> float:
    return facts.evaluate(fn, args)


@pytest.mark.parametrize(
    ("dtype", "flops_per_cu_per_clock"), [("bf16", 2048), ("fp8", 4096), ("tf32", 1024)]
)
def test_mi300x_peaks_follow_from_cus_clock_and_per_cu_rate(dtype, flops_per_cu_per_clock):
    row = ACCELERATORS["mi300x"]
    derived = row.compute_units * row.peak_clock_mhz * 1e6 * flops_per_cu_per_clock
    # The datasheet rounds to 0.1 TFLOPS.
    assert ev("accelerator_spec", device="mi300x", what="peak_flops", dtype=dtype) == pytest.approx(
        derived, abs=0.05e12
    )


def test_accelerator_spec_reads_both_registries():
    assert ev("accelerator_spec", device="mi300x", what="memory_bytes") == 192e9
    assert ev("accelerator_spec", device="mi300x", what="wavefront") == 64
    assert ev("accelerator_spec", device="m3-ultra", what="bandwidth") == 819e9
    # A registry GPU goes through labs.catalog.gpus: the H100's ridge point.
    assert ev("accelerator_spec", device="h100", what="ridge") == pytest.approx(989.5e12 / 3.35e12)
    with pytest.raises(KeyError, match="no published dense bf16"):
        ev("accelerator_spec", device="m4-max", what="peak_flops")
    with pytest.raises(KeyError, match="unknown device"):
        ev("accelerator_spec", device="mi999", what="bandwidth")


def test_fnuz_limits_come_from_torch():
    assert ev("fp8_info", dtype="fp8_e4m3", what="max") == 448
    assert ev("fp8_info", dtype="fp8_e4m3_fnuz", what="max") == 240
    assert ev("fp8_info", dtype="fp8_e4m3_fnuz", what="smallest_normal") == 2.0**-7
    assert ev("fp8_info", dtype="fp8_e5m2_fnuz", what="max") == 57344


@pytest.mark.parametrize("value", [448.0, 1.0, -3.5, 0.015625, 2.0**-9])
def test_same_byte_read_as_fnuz_is_half_the_value(value):
    # vLLM's normalize_e4m3fn_to_e4m3fnuz doubles the scale because of exactly this.
    assert ev("fp8_reinterpret", value=value) == value / 2


def test_negative_zero_becomes_nan_in_fnuz():
    from labs.catalog.facts.hardware import fp8_reinterpret

    assert math.isnan(fp8_reinterpret(-0.0))
    # The byte 0x80 really is the one FNUZ NaN.
    assert torch.tensor([0x80], dtype=torch.uint8).view(torch.float8_e4m3fnuz).float().isnan().all()


def test_mlx_bits_per_weight_table():
    # Checked once against mlx 0.32.4 (mx.quantize on a 256 x 4096 bf16 matrix): 4.5,
    # 4.25, 4.5, 8.25 and 9.0 bits per weight from the nbytes of codes, scales, biases.
    assert ev("mlx_bits_per_weight") == 4.5
    assert ev("mlx_bits_per_weight", mode="affine", bits=8, group_size=32) == 9.0
    assert ev("mlx_bits_per_weight", mode="mxfp8") == 8.25
    # The block formats match lowbit's own library.
    assert ev("mlx_bits_per_weight", mode="mxfp4") == ev("bits_per_value", format="mxfp4")
    assert ev("mlx_bits_per_weight", mode="nvfp4") == ev("bits_per_value", format="nvfp4")
    with pytest.raises(ValueError, match="group sizes"):
        ev("mlx_bits_per_weight", mode="mxfp4", group_size=64)


def test_mlx_weight_bytes_and_decode_bound():
    spec = get_model("llama-3.1-8b")
    norms = sum(g.params for g in tensor_groups(spec) if g.kind == "norm")
    expected = (8_030_261_248 - norms) * 4.5 / 8 + norms * 2
    assert ev("mlx_weight_bytes", model="llama-3.1-8b") == round(expected)
    embedding = spec.vocab_size * spec.hidden_size * 4.5 / 8
    read = round(expected) - embedding + spec.hidden_size * 4.5 / 8
    bound = ev("mlx_decode_tokens_per_s_bound", model="llama-3.1-8b", device="m4-max")
    assert bound == pytest.approx(546e9 / read)
    with pytest.raises(ValueError, match="MoE"):
        ev("mlx_weight_bytes", model="mixtral-8x7b")


def test_fnuz_maximum_is_nan_when_read_as_ocp():
    from labs.catalog.facts.hardware import fp8_reinterpret

    # 240 in FNUZ is the byte 0x7F, which OCP e4m3fn reserves for NaN: the reverse of
    # vLLM's normalisation is not safe.
    assert math.isnan(fp8_reinterpret(240.0, source="fp8_e4m3_fnuz", target="fp8_e4m3"))
    assert fp8_reinterpret(120.0, source="fp8_e4m3_fnuz", target="fp8_e4m3") == 240.0


def test_decode_bound_is_bandwidth_over_bytes_read():
    from labs.catalog import roofline

    spec = get_model("llama-3.1-70b")
    read = roofline.weight_bytes_read_per_step(spec, "bf16", 1, 1)
    assert ev(
        "decode_tokens_per_s_bound", model="llama-3.1-70b", weight_format="bf16", device="mi300x"
    ) == pytest.approx(5.3e12 / read)
    # Two H100s each read half the (sharded) weights at their own bandwidth.
    two = ev(
        "decode_tokens_per_s_bound",
        model="llama-3.1-70b",
        weight_format="bf16",
        device="h100",
        tensor_parallel=2,
    )
    assert two == pytest.approx(3.35e12 / roofline.weight_bytes_read_per_step(spec, "bf16", 2, 1))
    with pytest.raises(ValueError, match="tensor_parallel 3"):
        ev(
            "decode_tokens_per_s_bound",
            model="llama-3.1-70b",
            weight_format="bf16",
            device="h100",
            tensor_parallel=3,
        )

"""labs.catalog.facts: the functions content facts call, checked against known values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from labs.catalog import facts, formats, memory
from labs.catalog.models import get_model

CONTENT_FORMAT = Path(__file__).resolve().parents[3] / "docs" / "content-format.md"


def test_every_function_of_the_content_format_table_is_registered():
    table = CONTENT_FORMAT.read_text().split("## Facts", 1)[1].split("\n## ", 1)[0]
    documented = set(re.findall(r"^\| `(\w+)` \|", table, re.MULTILINE))
    assert documented and documented <= set(facts.FACTS)


@pytest.mark.parametrize(
    ("fn", "args", "expected"),
    [
        ("param_count", {"model": "llama-3.1-70b"}, 70_553_706_496),
        ("param_count", {"model": "llama-3.1-8b"}, 8_030_261_248),
        ("param_count", {"model": "llama-3.1-405b"}, 405_853_388_800),
        ("weight_bytes", {"model": "llama-3.1-70b", "weight_format": "bf16"}, 141_107_412_992),
        ("weight_bytes", {"model": "llama-3.1-70b", "weight_format": "fp32"}, 282_214_825_984),
        ("kv_bytes_per_token", {"model": "llama-3.1-70b", "kv_dtype": "bf16"}, 327_680),
        ("kv_bytes_per_token", {"model": "llama-3.1-8b", "kv_dtype": "bf16"}, 131_072),
        ("kv_bytes_per_token", {"model": "llama-3.1-405b", "kv_dtype": "bf16"}, 516_096),
        ("kv_bytes_per_token", {"model": "llama-3.1-8b", "kv_dtype": "fp8"}, 65_536),
        ("gpu_memory_bytes", {"gpu": "h100"}, 80e9),
        ("gpu_visible_memory_bytes", {"gpu": "h100"}, 81_559 * 2**20),
        ("gpu_bandwidth", {"gpu": "h200"}, 4.8e12),
        ("compute_capability", {"gpu": "l4"}, 8.9),
        ("compute_capability", {"gpu": "b200"}, 10.0),
        ("dtype_max", {"dtype": "fp8_e4m3"}, 448),
        ("dtype_max", {"dtype": "fp8_e5m2"}, 57344),
        ("dtype_max", {"dtype": "fp6_e2m3"}, 7.5),
        ("dtype_max", {"dtype": "fp6_e3m2"}, 28),
        ("dtype_max", {"dtype": "fp4_e2m1"}, 6),
        ("dtype_max", {"dtype": "fp16"}, 65504),
        ("dtype_max", {"dtype": "int8"}, 127),
        ("dtype_max", {"dtype": "int4"}, 7),
        ("dtype_min_normal", {"dtype": "fp16"}, 2.0**-14),
        ("dtype_min_normal", {"dtype": "fp8_e4m3"}, 2.0**-6),
        ("dtype_min_normal", {"dtype": "fp6_e3m2"}, 0.25),
        ("dtype_min_normal", {"dtype": "fp4_e2m1"}, 1.0),
        ("dtype_bits", {"dtype": "tf32"}, 19),
        ("dtype_bits", {"dtype": "fp6_e2m3"}, 6),
        ("dtype_bits", {"dtype": "int4"}, 4),
    ],
)
def test_evaluate_known_values(fn, args, expected):
    assert facts.evaluate(fn, args) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("dtype", "torch_dtype"),
    [
        ("fp32", torch.float32),
        ("bf16", torch.bfloat16),
        ("fp16", torch.float16),
        ("fp8_e4m3", torch.float8_e4m3fn),
        ("fp8_e5m2", torch.float8_e5m2),
    ],
)
def test_float_limits_agree_with_torch(dtype, torch_dtype):
    info = torch.finfo(torch_dtype)
    assert facts.dtype_max(dtype) == info.max
    assert facts.dtype_min_normal(dtype) == info.tiny
    assert facts.dtype_bits(dtype) == info.bits


def test_tf32_has_fp32_range_and_fewer_mantissa_bits():
    assert facts.dtype_min_normal("tf32") == facts.dtype_min_normal("fp32")
    assert facts.dtype_max("tf32") == (2 - 2**-10) * 2.0**127


def test_weight_bytes_uses_the_memory_budget_rules():
    assert facts.weight_bytes("llama-3.1-70b", "nvfp4") == memory.weight_bytes(
        get_model("llama-3.1-70b"), "nvfp4"
    )


def test_errors_name_the_problem():
    with pytest.raises(KeyError, match="unknown fact function"):
        facts.evaluate("flops", {})
    with pytest.raises(TypeError, match="param_count"):
        facts.evaluate("param_count", {"modle": "llama-3.1-8b"})
    with pytest.raises(KeyError, match="unknown weight_format"):
        facts.evaluate("weight_bytes", {"model": "llama-3.1-8b", "weight_format": "fp6"})
    with pytest.raises(KeyError, match="unknown kv_dtype"):
        facts.evaluate("kv_bytes_per_token", {"model": "llama-3.1-8b", "kv_dtype": "int4"})
    with pytest.raises(ValueError, match="no normal numbers"):
        facts.evaluate("dtype_min_normal", {"dtype": "int8"})
    with pytest.raises(KeyError, match="unknown dtype"):
        facts.evaluate("dtype_max", {"dtype": "fp64"})


@pytest.mark.parametrize(
    ("fmt", "bits", "block"),
    [
        ("nvfp4", 4.5, 16),
        ("mxfp4", 4.25, 32),
        ("nf4", 4.5, 64),
        ("q4_0", 4.5, 32),
        ("q8_0", 8.5, 32),
    ],
)
def test_bits_per_value_and_block_size_delegate_to_labs_quant(fmt, bits, block):
    assert facts.evaluate("bits_per_value", {"format": fmt}) == bits
    assert facts.evaluate("block_size", {"format": fmt}) == block
    # The memory accounting stores these formats with the same bits per value.
    assert formats.WEIGHT_FORMATS[fmt].bits_per_value == bits
    assert formats.WEIGHT_FORMATS[fmt].block_size == block

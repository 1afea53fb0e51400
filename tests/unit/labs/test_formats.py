"""labs.catalog.formats: each vocabulary is built from its table, so a new row is offered."""

from __future__ import annotations

from typing import get_args

from labs.catalog import formats
from labs.catalog.kernel_paths import RULES
from labs.quant.spec import SPECS


def test_the_literal_types_are_the_tables_keys_in_order():
    assert get_args(formats.KvDtype) == tuple(formats.KV_DTYPE_BYTES)
    offered = tuple(k for k, f in formats.WEIGHT_FORMATS.items() if f.lab_choice)
    assert get_args(formats.WeightFormatKey) == offered
    assert "awq" not in offered and "gptq" not in offered  # checkpoint layouts, not choices
    assert get_args(formats.QuantFormatKey) == tuple(k.value for k in SPECS)
    assert get_args(formats.CheckpointFormatKey) == tuple(formats.CHECKPOINT_FORMATS)


def test_every_native_type_is_a_tensor_core_type():
    types = set(get_args(formats.TensorType))
    natives = [f.native_type for f in formats.WEIGHT_FORMATS.values()]
    natives += [f.native_type for f in formats.CHECKPOINT_FORMATS.values()]
    assert {t for t in natives if t is not None} <= types


def test_every_checkpoint_format_is_stored_as_a_weight_format_and_has_kernel_paths():
    for key, fmt in formats.CHECKPOINT_FORMATS.items():
        assert fmt.memory_key in formats.WEIGHT_FORMATS
        assert RULES[key][-1].min_sm == 0  # every capability gets an answer


def test_throughput_keys_are_the_datasheets_widths():
    assert formats.throughput_key("nvfp4") == formats.throughput_key("mxfp4") == "fp4"
    assert formats.throughput_key("fp8_e4m3") == "fp8"
    assert formats.throughput_key("int8") == "int8"

"""labs.quant.cpu reads /proc/cpuinfo; torch detects the same instructions with CPUID."""

from __future__ import annotations

import pytest
import torch

from labs.quant.awq import search_dtype
from labs.quant.cpu import bf16_native, cpu_flags


def test_bf16_native_agrees_with_torchs_own_detection() -> None:
    if not cpu_flags():
        pytest.skip("no /proc/cpuinfo here: nothing to compare")
    torch_says = torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported()
    assert bf16_native() == torch_says
    assert search_dtype("cpu") == (torch.bfloat16 if torch_says else torch.float32)

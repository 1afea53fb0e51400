"""q8_0, q4_0 and q4_1 are bit-exact with llama.cpp's reference quantizer, via gguf-py
(pip package ``gguf``: a numpy port of quantize_row_*_ref, GGUF's writer)."""

import numpy as np
import pytest
import torch

from labs.quant import quantize

gguf = pytest.importorskip("gguf", reason="gguf (gguf-py) is a dev dependency: pip install gguf")
from gguf import GGMLQuantizationType as GGMLType  # noqa: E402

GGUF_TYPES = {"q8_0": GGMLType.Q8_0, "q4_0": GGMLType.Q4_0, "q4_1": GGMLType.Q4_1}


def inputs() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1234)
    normal = torch.randn(64, 256, generator=gen)
    outliers = normal.clone()
    outliers[::7, ::13] *= 50
    # Values on the rounding boundaries: multiples of 1/4 give exact ties after scaling.
    ties = torch.randint(-32, 33, (32, 128), generator=gen).float() / 4
    # Blocks whose largest magnitude appears with both signs.
    signed_ties = torch.randn(16, 64, generator=gen)
    signed_ties[:, 5] = 3.0
    signed_ties[:, 20] = -3.0
    signed_ties[::2, 5], signed_ties[::2, 20] = -3.0, 3.0
    tiny = torch.randn(8, 64, generator=gen) * 1e-6
    zeros_mixed = normal[:4].clone()
    zeros_mixed[:, :32] = 0
    return {
        "normal": normal,
        "outliers": outliers,
        "ties": ties,
        "signed_ties": signed_ties,
        "tiny": tiny,
        "zero_blocks": zeros_mixed,
        "3d": torch.randn(3, 4, 96, generator=gen) * 10,
    }


@pytest.mark.parametrize("key", sorted(GGUF_TYPES))
@pytest.mark.parametrize("name", sorted(inputs()))
def test_bytes_codes_and_values_match_gguf_py(key, name):
    x = inputs()[name]
    reference = gguf.quants.quantize(x.numpy(), GGUF_TYPES[key])
    q = quantize(x, key)
    assert q.to_bytes() == reference.tobytes()
    assert q.nbytes == reference.nbytes
    expected = gguf.quants.dequantize(reference, GGUF_TYPES[key])
    assert np.array_equal(q.dequantize().numpy(), expected)


def test_bf16_and_fp16_inputs_match_their_fp32_upcast():
    x = inputs()["normal"]
    for dtype in (torch.bfloat16, torch.float16):
        xd = x.to(dtype)
        reference = gguf.quants.quantize(xd.float().numpy(), GGMLType.Q4_0)
        assert quantize(xd, "q4_0").to_bytes() == reference.tobytes()


def test_rows_not_a_multiple_of_32_are_padded_and_reported():
    x = torch.randn(5, 40)
    q = quantize(x, "q8_0")
    assert q.padded == 5 * 24
    assert q.nbytes == 5 * 2 * 34
    # The padded row quantizes like the row with its last value repeated.
    repeated = torch.cat([x, x[:, -1:].expand(-1, 24)], dim=1)
    assert q.to_bytes() == gguf.quants.quantize(repeated.numpy(), GGMLType.Q8_0).tobytes()
    assert q.dequantize().shape == (5, 40)

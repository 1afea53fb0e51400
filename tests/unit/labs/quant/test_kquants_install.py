"""The install builds the native kernels wherever it can (a C compiler and Python's
headers): without them every q4_k/q6_k quantization runs ~20x slower and GPTQ ~2x, and
test_kquants_native.py and test_gptq_native.py, which compare them with the torch
code, skip."""

import pytest

from labs.quant import gptq, native
from labs.quant.formats import gguf_k


def test_the_install_built_the_kernel():
    if not native.can_build_kernel():
        pytest.skip("no C compiler or Python.h here: `make install` warned that it is missing")
    assert native.kernel_built(), native.missing_kernel_warning()
    assert gguf_k.KERNEL is not None  # built and it loads
    assert gptq.NATIVE is not None


def test_the_warning_names_the_cost_and_the_fix(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(native, "kernel_built", lambda: False)
    message = native.missing_kernel_warning()
    assert message and "20x slower" in message and "apt-get install gcc" in message
    assert "GPTQ about 2x slower" in message

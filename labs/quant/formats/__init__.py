"""One module per format family; importing this package registers every format."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from labs.quant.core import _REGISTRY
from labs.quant.formats import fp8, gguf, gguf_k, integer, mx, nf4, nvfp4

if TYPE_CHECKING:
    from labs.quant.core import Format


def registry() -> Mapping[str, type[Format]]:
    """Every format class by key (importing this package registered them)."""
    return _REGISTRY


__all__ = ["registry", "fp8", "gguf", "gguf_k", "integer", "mx", "nf4", "nvfp4"]

"""One module per format family; importing this package registers every format."""

from labs.quant.formats import fp8, gguf, gguf_k, integer, mx, nf4, nvfp4

__all__ = ["fp8", "gguf", "gguf_k", "integer", "mx", "nf4", "nvfp4"]

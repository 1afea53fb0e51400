import torch


def quantize(x: torch.Tensor, fmt: str, scale: float | None) -> tuple[torch.Tensor, float]:
    """(float8 codes shaped like x, the per-tensor scale): value = codes.float() * scale."""
    # dtype and F8_MAX from fmt; scale = amax / F8_MAX when None
    # codes = clamp(x / scale, -F8_MAX, F8_MAX).to(dtype)
    raise NotImplementedError

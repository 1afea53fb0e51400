import torch

FP8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def quantize(x: torch.Tensor, fmt: str, scale: float | None) -> tuple[torch.Tensor, float]:
    """(float8 codes shaped like x, the per-tensor scale): value = codes.float() * scale."""
    dtype, f8_max = FP8[fmt]
    x = x.to(torch.float32)
    s = x.abs().max() / f8_max if scale is None else torch.tensor(scale, dtype=torch.float32)
    divisor = s if s != 0 else torch.tensor(1.0)
    codes = (x / divisor).clamp(-f8_max, f8_max).to(dtype)
    return codes, float(s)

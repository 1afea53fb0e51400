# expect: multiplying by the scale
import torch

FP8 = {"e4m3": (torch.float8_e4m3fn, 448.0), "e5m2": (torch.float8_e5m2, 57344.0)}


def quantize(x, fmt, scale):
    dtype, f8_max = FP8[fmt]
    s = x.abs().max() / f8_max if scale is None else torch.tensor(scale)
    return (x * s).clamp(-f8_max, f8_max).to(dtype), float(s)

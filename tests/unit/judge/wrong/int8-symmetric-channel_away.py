# expect: rounding halves away from zero
import torch


def quantize(w):
    scale = w.abs().amax(dim=1) / 127
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    u = w / divisor[:, None]
    codes = torch.where(u >= 0, torch.floor(u + 0.5), torch.ceil(u - 0.5))  # C's roundf
    return codes.clamp(-127, 127).to(torch.int8), scale

# expect: -
import torch


def quantize(w):
    scale = w.abs().amax(dim=1) / 127
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.round(w / divisor[:, None]), scale  # codes left as float32

# expect: one scale for the whole tensor
import torch


def quantize(w):
    scale = (w.abs().amax() / 127).expand(w.shape[0]).clone()
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    return torch.round(w / divisor[:, None]).clamp(-127, 127).to(torch.int8), scale

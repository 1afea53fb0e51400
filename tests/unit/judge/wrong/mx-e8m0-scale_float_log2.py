# expect: float log2
import torch


def scale_codes(x, rule):
    amax = x.reshape(-1, 32).abs().amax(dim=1)
    if rule == "floor":
        code = torch.floor(torch.log2(amax)) - 2 + 127
    else:
        code = torch.ceil(torch.log2(amax / 6)) + 127
    code = torch.where(amax == 0, torch.zeros_like(code), code)
    return code.clamp(0, 254).to(torch.uint8)

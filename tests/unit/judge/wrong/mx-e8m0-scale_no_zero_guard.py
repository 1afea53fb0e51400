# expect: missing zero-block guard
import torch


def scale_codes(x, rule):
    amax = x.reshape(-1, 32).abs().amax(dim=1)
    if rule == "floor":
        code = torch.frexp(amax)[1] - 1 - 2 + 127
    else:
        m, e = torch.frexp(amax / 6)
        code = torch.where(m == 0.5, e - 1, e) + 127
    return code.clamp(0, 254).to(torch.uint8)

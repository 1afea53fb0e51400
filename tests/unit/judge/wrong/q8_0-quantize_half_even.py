# expect: rounding half to even
import torch


def quantize(x: torch.Tensor) -> bytes:
    blocks = x.reshape(-1, 32)
    d = blocks.abs().amax(dim=1) / 127
    inverse = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    codes = (blocks * inverse[:, None]).round().to(torch.int8)  # torch.round: half to even
    d16 = d.to(torch.float16).view(torch.uint8).reshape(-1, 2)
    return torch.cat([d16, codes.view(torch.uint8)], dim=1).numpy().tobytes()

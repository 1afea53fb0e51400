# expect: stored as float32
import torch


def pack(codes: torch.Tensor, d: torch.Tensor) -> bytes:
    blocks = codes.reshape(-1, 32)
    qs = blocks[:, :16] | (blocks[:, 16:] << 4)
    d_bytes = d.float().view(torch.uint8).reshape(-1, 4)
    return torch.cat([d_bytes, qs], dim=1).numpy().tobytes()

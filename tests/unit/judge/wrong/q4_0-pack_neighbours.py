# expect: nibble order: byte j holds elements j (low) and j + 16 (high), not the neighbours
import torch


def pack(codes: torch.Tensor, d: torch.Tensor) -> bytes:
    blocks = codes.reshape(-1, 32)
    qs = blocks[:, 0::2] | (blocks[:, 1::2] << 4)  # int4-style: neighbours share a byte
    return torch.cat([d.view(torch.uint8).reshape(-1, 2), qs], dim=1).numpy().tobytes()

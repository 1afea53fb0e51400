# expect: nibble order: byte j holds elements j (low) and j + 16
import torch


def dequantize(data: bytes, n: int) -> torch.Tensor:
    rows = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, 18)
    d = rows[:, :2].contiguous().view(torch.float16).float()
    qs = rows[:, 2:]
    codes = torch.stack([qs & 0x0F, qs >> 4], dim=2).reshape(-1, 32)  # neighbours: 2j, 2j + 1
    return ((codes.float() - 8) * d).reshape(-1)[:n]

# expect: read as signed 4-bit numbers
import torch


def dequantize(data: bytes, n: int) -> torch.Tensor:
    rows = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, 18)
    d = rows[:, :2].contiguous().view(torch.float16).float()
    qs = rows[:, 2:].to(torch.int16)
    codes = torch.cat([qs & 0x0F, qs >> 4], dim=1)
    codes = torch.where(codes >= 8, codes - 16, codes)  # two's complement nibbles
    return (codes.float() * d).reshape(-1)[:n]

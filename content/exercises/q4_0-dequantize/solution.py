import torch


def dequantize(data: bytes, n: int) -> torch.Tensor:
    """The first n float32 values of GGUF Q4_0 blocks (18 bytes per 32 values)."""
    rows = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, 18)
    d = rows[:, :2].contiguous().view(torch.float16).to(torch.float32)  # (blocks, 1)
    qs = rows[:, 2:]
    codes = torch.cat([qs & 0x0F, qs >> 4], dim=1).to(torch.float32)  # elements 0..15, 16..31
    return ((codes - 8) * d).reshape(-1)[:n]

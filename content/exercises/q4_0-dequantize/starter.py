import torch


def dequantize(data: bytes, n: int) -> torch.Tensor:
    """The first n float32 values of GGUF Q4_0 blocks (18 bytes per 32 values)."""
    # rows = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, 18)
    # d: bytes 0-1 of each row, as fp16 -> float32
    # codes: low nibbles are elements 0..15, high nibbles elements 16..31
    # values: (code - 8) * d, flattened, first n
    raise NotImplementedError

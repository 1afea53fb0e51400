import torch


def pack(codes: torch.Tensor, d: torch.Tensor) -> bytes:
    """GGUF Q4_0 blocks: per block the fp16 d (2 bytes), then 16 bytes of nibble pairs."""
    blocks = codes.to(torch.uint8).reshape(-1, 32)
    qs = blocks[:, :16] | (blocks[:, 16:] << 4)
    d_bytes = d.to(torch.float16).contiguous().view(torch.uint8).reshape(-1, 2)
    return torch.cat([d_bytes, qs], dim=1).numpy().tobytes()

import torch


def pack(codes: torch.Tensor, d: torch.Tensor) -> bytes:
    """GGUF Q4_0 blocks: per block the fp16 d (2 bytes), then 16 bytes of nibble pairs."""
    # blocks = codes.reshape(-1, 32)
    # byte j of a block: element j in the low nibble, element j + 16 in the high nibble
    raise NotImplementedError

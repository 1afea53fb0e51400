import torch


def quantize(x: torch.Tensor) -> bytes:
    """GGUF Q8_0 blocks of x (float32, 1-D, len(x) % 32 == 0): per block fp16 d, 32 int8."""
    # blocks = x.reshape(-1, 32)
    # 1. amax per block, d = amax / 127, id = 1 / d (0 where d == 0)
    # 2. codes = round half away from zero of blocks * id, as int8
    # 3. per block: d as fp16 bytes (little-endian), then the 32 code bytes
    raise NotImplementedError

import torch


def quantize(x: torch.Tensor) -> bytes:
    """GGUF Q8_0 blocks of x (float32, 1-D, len(x) % 32 == 0): per block fp16 d, 32 int8."""
    blocks = x.to(torch.float32).reshape(-1, 32)
    d = blocks.abs().amax(dim=1) / 127
    inverse = torch.where(d == 0, torch.zeros_like(d), 1.0 / d)
    scaled = blocks * inverse[:, None]
    # C's roundf: halves away from zero. trunc(v) + 1 toward v's sign when |v - trunc(v)| >= 0.5
    whole = scaled.trunc()
    codes = whole + torch.where(
        (scaled - whole).abs() >= 0.5, scaled.sign(), torch.zeros_like(scaled)
    )
    d16 = d.to(torch.float16).view(torch.uint8).reshape(-1, 2)
    q = codes.to(torch.int8).view(torch.uint8)
    return torch.cat([d16, q], dim=1).numpy().tobytes()

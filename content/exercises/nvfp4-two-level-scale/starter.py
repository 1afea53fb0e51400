import torch


def scales(x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(float32 tensor scale, E4M3 scale per block of 16) of NVFP4."""
    # tensor_scale = amax / (448 * 6)
    # block scale = ((block amax / 6) / tensor_scale) cast to torch.float8_e4m3fn
    raise NotImplementedError

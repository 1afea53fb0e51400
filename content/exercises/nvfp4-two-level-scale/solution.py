import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0


def scales(x: torch.Tensor) -> tuple[float, torch.Tensor]:
    """(float32 tensor scale, E4M3 scale per block of 16) of NVFP4."""
    x = x.to(torch.float32)
    tensor_scale = x.abs().max() / (E4M3_MAX * E2M1_MAX)
    divisor = tensor_scale if tensor_scale != 0 else torch.tensor(1.0)
    block_amax = x.reshape(-1, 16).abs().amax(dim=1)
    block_scale = ((block_amax / E2M1_MAX) / divisor).to(torch.float8_e4m3fn)
    return float(tensor_scale), block_scale

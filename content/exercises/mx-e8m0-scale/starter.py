import torch


def scale_codes(x: torch.Tensor, rule: str) -> torch.Tensor:
    """E8M0 code (uint8) of each block of 32 for MXFP4: rule 'floor' (OCP) or 'rceil' (NVIDIA)."""
    # amax = x.reshape(-1, 32).abs().amax(dim=1)
    # floor: floor(log2(amax)) - 2 + 127, clamped to [0, 254]
    # rceil: ceil(log2(amax / 6)) + 127
    # zero blocks: code 0
    raise NotImplementedError

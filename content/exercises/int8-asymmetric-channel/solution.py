import torch


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(uint8 codes, float32 scale per row, uint8 zero point per row) of a (out, in) weight."""
    w = w.to(torch.float32)
    lo = w.amin(dim=1).clamp(max=0)
    hi = w.amax(dim=1).clamp(min=0)
    scale = (hi / 255 - lo / 255).abs()
    divisor = torch.where(scale == 0, torch.ones_like(scale), scale)
    zero_point = torch.round(-lo / divisor).clamp(0, 255)
    codes = (torch.round(w / divisor[:, None]) + zero_point[:, None]).clamp(0, 255)
    return codes.to(torch.uint8), scale, zero_point.to(torch.uint8)

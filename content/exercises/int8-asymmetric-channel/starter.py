import torch


def quantize(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(uint8 codes, float32 scale per row, uint8 zero point per row) of a (out, in) weight."""
    # lo = min(row min, 0), hi = max(row max, 0); scale = |hi/255 - lo/255|
    # zero_point = clamp(round(-lo / scale), 0, 255)
    # codes = clamp(round(w / scale) + zero_point, 0, 255)
    raise NotImplementedError

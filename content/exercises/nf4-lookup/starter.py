import torch

NF4_TABLE = [
    -1.0,
    -0.6961928009986877,
    -0.5250730514526367,
    -0.39491748809814453,
    -0.28444138169288635,
    -0.18477343022823334,
    -0.09105003625154495,
    0.0,
    0.07958029955625534,
    0.16093020141124725,
    0.24611230194568634,
    0.33791524171829224,
    0.44070982933044434,
    0.5626170039176941,
    0.7229568362236023,
    1.0,
]


def encode(x: torch.Tensor) -> torch.Tensor:
    """NF4 code (uint8, 0..15) of each element; blocks of 64 with a float32 absmax each."""
    # y = clamp(x * (1 / absmax), -1, 1) per block of 64
    # midpoints between neighbouring table entries; code = number of midpoints < y
    raise NotImplementedError

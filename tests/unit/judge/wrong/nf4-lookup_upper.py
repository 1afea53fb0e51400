# expect: took the upper code
import torch


def encode(x):
    table = torch.tensor(
        [
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
    )
    mids = (table[:-1] + table[1:]) / 2
    blocks = x.reshape(-1, 64)
    y = (blocks * (1 / blocks.abs().amax(dim=1, keepdim=True).clamp(min=1e-38))).clamp(-1, 1)
    return (mids <= y[..., None]).sum(-1).reshape(x.shape).to(torch.uint8)  # <=: ties go up

# expect: -
import struct

import torch


def dequantize(data: bytes, n: int) -> torch.Tensor:
    values = []
    for b in range(0, len(data), 18):
        (d,) = struct.unpack("<e", data[b : b + 2])
        qs = data[b + 2 : b + 18]
        values += [((q & 0x0F) - 8) * d for q in qs] + [((q >> 4) - 8) * d for q in qs]
    return torch.tensor(values[:n], dtype=torch.float64)  # float64, not float32

# expect: missing zero-block guard
import torch


def scales(x):
    tensor_scale = x.abs().max() / (448 * 6)
    block = (x.reshape(-1, 16).abs().amax(dim=1) / 6) / tensor_scale
    return float(tensor_scale), block.to(torch.float8_e4m3fn)

# expect: -
# floor(v + 0.5) for positive values, ceil(v - 0.5) for negative ones: 0.49999997 becomes 1.
import torch
import triton
import triton.language as tl


@triton.jit
def q8_0_kernel(x_ptr, d_ptr, q_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    v = tl.load(x_ptr + offsets)
    d = tl.max(tl.abs(v), axis=0) / 127.0
    scaled = v * tl.where(d == 0.0, 0.0, 1.0 / d)
    codes = tl.where(scaled >= 0, tl.floor(scaled + 0.5), tl.ceil(scaled - 0.5))
    tl.store(d_ptr + pid, d.to(tl.float16))
    tl.store(q_ptr + offsets, codes.to(tl.int8))


def quantize(x):
    blocks = x.numel() // 32
    d = torch.empty(blocks, dtype=torch.float16)
    q = torch.empty(x.numel(), dtype=torch.int8)
    q8_0_kernel[(blocks,)](x.contiguous(), d, q, BLOCK=32)
    return (
        torch.cat([d.view(torch.uint8).reshape(-1, 2), q.view(torch.uint8).reshape(-1, 32)], 1)
        .numpy()
        .tobytes()
    )

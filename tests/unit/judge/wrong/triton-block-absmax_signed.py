# expect: the largest signed value
import torch
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    values = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.max(values, axis=0))  # no abs


def block_absmax(x, block):
    out = torch.empty(x.numel() // block, dtype=torch.float32)
    absmax_kernel[(out.numel(),)](x, out, BLOCK=block)
    return out

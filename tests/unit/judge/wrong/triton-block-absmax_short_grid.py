# expect: the last block was not computed
import torch
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    values = tl.load(x_ptr + pid * BLOCK + tl.arange(0, BLOCK))
    tl.store(out_ptr + pid, tl.max(tl.abs(values), axis=0))


def block_absmax(x, block):
    out = torch.zeros(x.numel() // block, dtype=torch.float32)
    absmax_kernel[(out.numel() - 1,)](x, out, BLOCK=block)  # one program short
    return out

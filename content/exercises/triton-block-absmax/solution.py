import torch
import triton
import triton.language as tl


@triton.jit
def absmax_kernel(x_ptr, out_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offsets = pid * BLOCK + tl.arange(0, BLOCK)
    values = tl.load(x_ptr + offsets)
    tl.store(out_ptr + pid, tl.max(tl.abs(values), axis=0))


def block_absmax(x: torch.Tensor, block: int) -> torch.Tensor:
    """Largest |x| of each block of `block` values (float32, len(x) // block values)."""
    x = x.contiguous()
    out = torch.empty(x.numel() // block, dtype=torch.float32, device=x.device)
    absmax_kernel[(out.numel(),)](x, out, BLOCK=block)
    return out

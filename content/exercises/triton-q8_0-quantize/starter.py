import torch
import triton
import triton.language as tl


@triton.jit
def q8_0_kernel(x_ptr, d_ptr, q_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    # load the block, amax, d = amax / 127, id = 1 / d (0 if d == 0)
    # codes: round half away from zero of v * id; store d (fp16) and the codes (int8)
    pass


def quantize(x: torch.Tensor) -> bytes:
    """GGUF Q8_0 bytes of x (float32, 1-D, len % 32 == 0), computed by q8_0_kernel."""
    blocks = x.numel() // 32
    d = torch.empty(blocks, dtype=torch.float16)
    q = torch.empty(x.numel(), dtype=torch.int8)
    q8_0_kernel[(blocks,)](x.contiguous(), d, q, BLOCK=32)
    raise NotImplementedError  # put each block's 2 bytes of d before its 32 code bytes

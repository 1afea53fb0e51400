import torch
import triton
import triton.language as tl


@triton.jit
def dequant_matmul_kernel(
    a_ptr,
    q_ptr,
    s_ptr,
    c_ptr,
    M,
    N,
    K,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    QBLOCK: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    # for each block of QBLOCK along K: load A's tile, the codes and the scales, accumulate
    # store acc into c (M, N), row-major


def matmul_q8_0(a: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ (codes * scales per block of 32)^T -> (M, N) float32."""
    M, K = a.shape
    N = codes.shape[0]
    c = torch.empty(M, N, dtype=torch.float32)
    grid = (M // 16, N // 16)
    dequant_matmul_kernel[grid](a, codes, scales, c, M, N, K, BLOCK_M=16, BLOCK_N=16, QBLOCK=32)
    return c

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
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, QBLOCK)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, K // QBLOCK):
        k = kb * QBLOCK + ks
        a = tl.load(a_ptr + rows[:, None] * K + k[None, :])  # (BLOCK_M, QBLOCK)
        q = tl.load(q_ptr + cols[:, None] * K + k[None, :]).to(tl.float32)  # (BLOCK_N, QBLOCK)
        s = tl.load(s_ptr + cols * (K // QBLOCK) + kb)  # (BLOCK_N,)
        # ieee: full float32 products (a GPU would otherwise use TF32, 10-bit mantissas)
        acc += tl.dot(a, tl.trans(q), input_precision="ieee") * s[None, :]  # scale inside the sum
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)


def matmul_q8_0(a: torch.Tensor, codes: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    """a (M, K) @ (codes * scales per block of 32)^T -> (M, N) float32."""
    a, codes, scales = a.contiguous(), codes.contiguous(), scales.contiguous()
    M, K = a.shape
    N = codes.shape[0]
    c = torch.empty(M, N, dtype=torch.float32, device=a.device)
    grid = (M // 16, N // 16)
    dequant_matmul_kernel[grid](a, codes, scales, c, M, N, K, BLOCK_M=16, BLOCK_N=16, QBLOCK=32)
    return c

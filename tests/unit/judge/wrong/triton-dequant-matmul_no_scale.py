# expect: the scales were never applied
import torch
import triton
import triton.language as tl


@triton.jit
def kernel(
    a_ptr, q_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, QBLOCK: tl.constexpr
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    ks = tl.arange(0, QBLOCK)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for kb in range(0, K // QBLOCK):
        k = kb * QBLOCK + ks
        a = tl.load(a_ptr + rows[:, None] * K + k[None, :])
        q = tl.load(q_ptr + cols[:, None] * K + k[None, :]).to(tl.float32)
        acc += tl.dot(a, tl.trans(q))
    tl.store(c_ptr + rows[:, None] * N + cols[None, :], acc)


def matmul_q8_0(a, codes, scales):
    M, K = a.shape
    N = codes.shape[0]
    c = torch.empty(M, N, dtype=torch.float32)
    kernel[(M // 16, N // 16)](a, codes, c, M, N, K, BLOCK_M=16, BLOCK_N=16, QBLOCK=32)
    return c

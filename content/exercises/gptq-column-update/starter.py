import torch


def gptq(w: torch.Tensor, hinv: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """GPTQ int4 (per-row scale) of w (out, in), given hinv, the upper Cholesky factor of H^-1."""
    W = w.clone().float()
    Q = torch.zeros_like(W)
    for i in range(W.shape[1]):
        ...  # quantize column i, compute its error, update the columns i..in-1
    return Q

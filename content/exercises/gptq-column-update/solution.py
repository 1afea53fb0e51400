import torch

INT4_MAX = 7


def gptq(w: torch.Tensor, hinv: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """GPTQ int4 (per-row scale) of w (out, in), given hinv, the upper Cholesky factor of H^-1."""
    W = w.clone().float()
    Q = torch.zeros_like(W)
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    for i in range(W.shape[1]):
        q = torch.round(W[:, i] / safe).clamp(-INT4_MAX, INT4_MAX) * scale
        Q[:, i] = q
        err = (W[:, i] - q) / hinv[i, i]
        W[:, i:] -= torch.outer(err, hinv[i, i:])
    return Q

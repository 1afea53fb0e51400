# expect: only the next column was updated
import torch


def gptq(w, hinv, scale):
    W = w.clone()
    Q = torch.zeros_like(W)
    for i in range(W.shape[1]):
        q = torch.round(W[:, i] / scale).clamp(-7, 7) * scale
        Q[:, i] = q
        err = (W[:, i] - q) / hinv[i, i]
        if i + 1 < W.shape[1]:
            W[:, i + 1] -= err * hinv[i, i + 1]
    return Q

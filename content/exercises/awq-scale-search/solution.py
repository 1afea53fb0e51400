import torch

N_GRID = 20


def fake_quant_int4(w: torch.Tensor, group: int = 128) -> torch.Tensor:
    """Symmetric int4 (codes -7..7), one absmax scale per group of `group` inputs: Q(w), as floats."""
    g = w.reshape(w.shape[0], -1, group)
    scale = g.abs().amax(dim=-1, keepdim=True) / 7
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    return (torch.round(g / safe).clamp(-7, 7) * scale).reshape(w.shape)


def awq_scales(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """AWQ's per-input-channel scale s (in,) for w (out, in), from calibration inputs x (tokens, in)."""
    w, x = w.float(), x.float()
    mean_abs = x.abs().mean(dim=0)
    reference = x @ w.T
    best, best_s = None, None
    for i in range(N_GRID):
        s = mean_abs.pow(i / N_GRID).clamp(min=1e-4)
        s = s / (s.max() * s.min()).sqrt()
        w_hat = fake_quant_int4(w * s[None, :]) / s[None, :]
        loss = float((reference - x @ w_hat.T).pow(2).mean())
        if best is None or loss < best:
            best, best_s = loss, s
    return best_s

import torch


def fake_quant_int4(w: torch.Tensor, group: int = 128) -> torch.Tensor:
    """Symmetric int4 (codes -7..7), one absmax scale per group of `group` inputs: Q(w), as floats."""
    g = w.reshape(w.shape[0], -1, group)
    scale = g.abs().amax(dim=-1, keepdim=True) / 7
    safe = torch.where(scale == 0, torch.ones_like(scale), scale)
    return (torch.round(g / safe).clamp(-7, 7) * scale).reshape(w.shape)


def awq_scales(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """AWQ's per-input-channel scale s (in,) for w (out, in), from calibration inputs x (tokens, in)."""
    mean_abs = x.abs().mean(dim=0)
    # for alpha in i / 20: s from mean_abs, w_hat = fake_quant_int4(w * s) / s, output error
    raise NotImplementedError

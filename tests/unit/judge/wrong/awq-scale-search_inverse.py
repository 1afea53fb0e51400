# expect: scaled down


def awq_scales(w, x):
    s = x.abs().mean(dim=0).pow(-0.5).clamp(min=1e-4)
    return s / (s.max() * s.min()).sqrt()

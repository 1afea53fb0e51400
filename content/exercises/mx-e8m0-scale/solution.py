import torch

EMAX_E2M1 = 2  # E2M1's largest value is 1.5 * 2**2 = 6
E2M1_MAX = 6.0
E8M0_BIAS = 127


def scale_codes(x: torch.Tensor, rule: str) -> torch.Tensor:
    """E8M0 code (uint8) of each block of 32 for MXFP4: rule 'floor' (OCP) or 'rceil' (NVIDIA)."""
    amax = x.to(torch.float32).reshape(-1, 32).abs().amax(dim=1)
    if rule == "floor":
        _, e = torch.frexp(amax)  # amax = m * 2**e, 0.5 <= m < 1: floor(log2) = e - 1
        code = (e - 1) - EMAX_E2M1 + E8M0_BIAS
    else:
        descale = amax / E2M1_MAX
        m, e = torch.frexp(descale)
        code = torch.where(m == 0.5, e - 1, e) + E8M0_BIAS  # a power of two stays, others round up
    code = torch.where(amax == 0, torch.zeros_like(code), code)
    return code.clamp(0, 254).to(torch.uint8)

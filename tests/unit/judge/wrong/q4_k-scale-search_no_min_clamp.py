# expect: min was not clamped to 0
import torch

QK_K = 256  # values per super-block
SUB = 32  # values per sub-block
NMAX = 15  # 4-bit codes 0..15
SCALE_MAX = 63  # 6-bit sub-block scales and mins


def nearest_int(f: torch.Tensor) -> torch.Tensor:
    """llama.cpp's nearest_int: round half to even (for |f| < 2**22), as float."""
    return torch.round(f)


def make_qkx2_quants(x, w, rmin=-1.0, rdelta=0.1, nstep=20):
    """llama.cpp's make_qkx2_quants for S sub-blocks at once, x and w (S, 32) float32.

    Every sum runs left to right over the 32 values, in float32, as the C loops do.
    Returns (scale (S,), the_min (S,) = -min >= 0, L (S, 32) codes as float)."""
    n = x.shape[1]
    lo, hi = x[:, 0].clone(), x[:, 0].clone()
    sum_w = w[:, 0].clone()
    sum_x = sum_w * x[:, 0]
    for i in range(1, n):
        lo, hi = torch.minimum(lo, x[:, i]), torch.maximum(hi, x[:, i])
        sum_w = sum_w + w[:, i]
        sum_x = sum_x + w[:, i] * x[:, i]
    lo = lo
    flat = hi == lo
    span = torch.where(flat, torch.ones_like(hi), hi - lo)
    iscale = NMAX / span
    scale = 1 / iscale
    L = nearest_int(iscale[:, None] * (x - lo[:, None])).clamp(0, NMAX)
    best = torch.zeros_like(lo)
    for i in range(n):
        diff = scale * L[:, i] + lo - x[:, i]
        best = best + w[:, i] * (diff * diff)
    rmin32, rdelta32 = torch.tensor(rmin), torch.tensor(rdelta)  # C's float constants
    for step in range(nstep + 1):
        numerator = rmin32 + rdelta32 * step + NMAX  # float32 at every step, as in C
        iscale = numerator / torch.where(flat, torch.ones_like(hi), hi - lo)
        aux = nearest_int(iscale[:, None] * (x - lo[:, None])).clamp(0, NMAX)
        sum_l = torch.zeros_like(lo)
        sum_l2 = torch.zeros_like(lo)
        sum_xl = torch.zeros_like(lo)
        for i in range(n):
            wl = w[:, i] * aux[:, i]
            sum_l = sum_l + wl
            sum_l2 = sum_l2 + wl * aux[:, i]
            sum_xl = sum_xl + wl * x[:, i]
        D = sum_w * sum_l2 - sum_l * sum_l
        ok = D > 0
        safe_d = torch.where(ok, D, torch.ones_like(D))
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / safe_d
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / safe_d
        positive = this_min > 0
        this_scale = torch.where(
            positive, sum_xl / torch.where(ok, sum_l2, torch.ones_like(D)), this_scale
        )
        this_min = torch.where(positive, torch.zeros_like(this_min), this_min)
        mad = torch.zeros_like(lo)
        for i in range(n):
            diff = this_scale * aux[:, i] + this_min - x[:, i]
            mad = mad + w[:, i] * (diff * diff)
        better = ok & (mad < best) & ~flat
        L = torch.where(better[:, None], aux, L)
        best = torch.where(better, mad, best)
        scale = torch.where(better, this_scale, scale)
        lo = torch.where(better, this_min, lo)
    scale = torch.where(flat, torch.zeros_like(scale), scale)
    L = torch.where(flat[:, None], torch.zeros_like(L), L)
    return scale, -lo, L


def pack_scales(ls: torch.Tensor, lm: torch.Tensor) -> torch.Tensor:
    """8 six-bit scales and mins per super-block (B, 8) into 12 bytes (get_scale_min_k4)."""
    ls, lm = ls.to(torch.int32), lm.to(torch.int32)
    out = torch.zeros(ls.shape[0], 12, dtype=torch.int32)
    out[:, 0:4] = ls[:, 0:4] | ((ls[:, 4:8] >> 4) << 6)
    out[:, 4:8] = lm[:, 0:4] | ((lm[:, 4:8] >> 4) << 6)
    out[:, 8:12] = (ls[:, 4:8] & 0xF) | ((lm[:, 4:8] & 0xF) << 4)
    return out.to(torch.uint8)


def quantize(x: torch.Tensor) -> bytes:
    """GGUF Q4_K bytes of x (float32, 1-D, len % 256 == 0), as quantize_row_q4_K_ref."""
    x = x.to(torch.float32)
    subs = x.reshape(-1, SUB)
    sum_x2 = torch.zeros(subs.shape[0])
    for i in range(SUB):
        sum_x2 = sum_x2 + subs[:, i] * subs[:, i]
    av_x = torch.sqrt((sum_x2 / SUB).double()).float()  # sqrtf, correctly rounded
    weights = av_x[:, None] + subs.abs()
    scales, mins, L = make_qkx2_quants(subs, weights)
    scales, mins, L = scales.reshape(-1, 8), mins.reshape(-1, 8), L.reshape(-1, 8, SUB)
    max_scale = scales.amax(dim=1).clamp(min=0)
    max_min = mins.amax(dim=1).clamp(min=0)
    inv_scale = torch.where(max_scale > 0, SCALE_MAX / max_scale, torch.zeros_like(max_scale))
    inv_min = torch.where(max_min > 0, SCALE_MAX / max_min, torch.zeros_like(max_min))
    ls = nearest_int(inv_scale[:, None] * scales).clamp(max=SCALE_MAX)
    lm = nearest_int(inv_min[:, None] * mins).clamp(max=SCALE_MAX)
    d16 = (max_scale / SCALE_MAX).to(torch.float16)
    dmin16 = (max_min / SCALE_MAX).to(torch.float16)
    d = d16.float()[:, None] * ls
    dm = dmin16.float()[:, None] * lm
    safe = torch.where(d == 0, torch.ones_like(d), d)
    codes = nearest_int((x.reshape(-1, 8, SUB) + dm[..., None]) / safe[..., None]).clamp(0, NMAX)
    codes = torch.where((d == 0)[..., None], L, codes).to(torch.uint8).reshape(-1, 4, 2, SUB)
    qs = (codes[:, :, 0] | (codes[:, :, 1] << 4)).reshape(-1, 128)
    head = torch.cat(
        [d16.view(torch.uint8).reshape(-1, 2), dmin16.view(torch.uint8).reshape(-1, 2)], 1
    )
    return torch.cat([head, pack_scales(ls, lm), qs], dim=1).numpy().tobytes()

# expect: no error feedback
import torch


def gptq(w, hinv, scale):
    return torch.round(w / scale[:, None]).clamp(-7, 7) * scale[:, None]

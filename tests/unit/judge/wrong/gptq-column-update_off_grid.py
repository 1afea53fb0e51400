# expect: -


def gptq(w, hinv, scale):
    return w * 0.99  # not quantized at all

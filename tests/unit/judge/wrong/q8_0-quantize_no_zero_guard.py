# expect: -
# Python floats: an all-zero block divides by zero.
def quantize(x):
    out = bytearray()
    import struct

    values = x.tolist()
    for i in range(0, len(values), 32):
        block = values[i : i + 32]
        d = max(abs(v) for v in block) / 127
        out += struct.pack("<e", d)
        out += bytes((int(v / d + (0.5 if v >= 0 else -0.5))) & 0xFF for v in block)
    return bytes(out)

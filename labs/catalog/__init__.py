"""Reference facts, each written once: GPUs (``gpus``), formats (``formats``, on the rows
of ``labs.quant.spec``; ``kernel_paths``: which kernel a checkpoint format takes by
compute capability), models (``models``), memory accounting (``memory``, ``roofline``,
``params``) and the fact functions content cards call (``facts``).

Pure Python: nothing here imports torch at import time, and nothing imports a lab.
"""

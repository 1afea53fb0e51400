"""transformers, imported with two start-up warnings that are not the learner's filtered
out: transformers imports torchao when it is installed (its quantizer registry), and
torchao then logs "Failed to load …/_C_mxfp8…so" for CUDA kernels a CPU machine cannot
load (lowbit's MX formats are its own, pure torch), and registers two Enum classes with
torch's pytree, which torch 2.13 answers with a deprecation warning. Only those messages
are dropped; every other warning of either logger still shows.

Import this module where transformers would be imported first (the worker's preload,
the model loader): the filters sit on the loggers before torchao logs.
"""

from __future__ import annotations

import logging

# The loggers and the start of the messages dropped: torchao's optional CUDA extensions
# and torch's note about Enum classes torchao registers as pytree constants.
QUIET = {
    "torchao": ("Failed to load ",),
    "torch.utils._pytree": ("%s is an Enum subclass and is now natively supported",),
}


class _Drop(logging.Filter):
    def __init__(self, prefixes: tuple[str, ...]) -> None:
        super().__init__()
        self.prefixes = prefixes

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(self.prefixes)


def quiet_optional_kernels() -> None:
    """Install the filters once (idempotent)."""
    for name, prefixes in QUIET.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _Drop) for f in logger.filters):
            logger.addFilter(_Drop(prefixes))


quiet_optional_kernels()

import transformers  # noqa: E402  (after the filters, on purpose)

__all__ = ["quiet_optional_kernels", "transformers"]

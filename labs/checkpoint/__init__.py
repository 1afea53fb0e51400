"""Sharded safetensors checkpoints: build, break, inspect (shard-doctor's library).

- :mod:`~labs.checkpoint.layout`: the tensor table a Llama-style ``config.json`` implies;
- :mod:`~labs.checkpoint.awq`: AutoAWQ's GEMM packing (int4 codes in int32 words);
- :mod:`~labs.checkpoint.build`: write a tiny checkpoint and inject one fault;
- :mod:`~labs.checkpoint.loader` and :mod:`~labs.checkpoint.checks`: read it as
  ``transformers`` does and report each problem as a :class:`Finding`;
- :mod:`~labs.checkpoint.forward`: one forward pass that proves the weights are wired.

Importing the package imports no torch and no safetensors: each function imports them
when it runs, so the web process can import the lab that uses it.
"""

from labs.checkpoint.awq import awq_dequantize, awq_pack, awq_quantize, awq_unpack
from labs.checkpoint.build import (
    MISSING_SHARD,
    Built,
    CheckpointKind,
    FaultKey,
    build_checkpoint,
    reference_weights,
)
from labs.checkpoint.findings import Finding, Severity, ShardFile
from labs.checkpoint.forward import dense_weights, forward
from labs.checkpoint.layout import (
    AWQ_QUANT_CONFIG,
    CONFIG_FILE,
    INDEX_FILE,
    SHARD_COUNT,
    SINGLE_FILE,
    TINY_CONFIG,
    Expected,
    expected_tensors,
    fmt_shape,
    shard_name,
)
from labs.checkpoint.loader import Inspection, inspect_checkpoint

__all__ = [
    "AWQ_QUANT_CONFIG",
    "CONFIG_FILE",
    "INDEX_FILE",
    "MISSING_SHARD",
    "SHARD_COUNT",
    "SINGLE_FILE",
    "TINY_CONFIG",
    "Built",
    "CheckpointKind",
    "Expected",
    "FaultKey",
    "Finding",
    "Inspection",
    "Severity",
    "ShardFile",
    "awq_dequantize",
    "awq_pack",
    "awq_quantize",
    "awq_unpack",
    "build_checkpoint",
    "dense_weights",
    "expected_tensors",
    "fmt_shape",
    "forward",
    "inspect_checkpoint",
    "reference_weights",
    "shard_name",
]

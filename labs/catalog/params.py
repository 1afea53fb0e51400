"""Lab parameter types for a registry model on a GPU, shared by the budget labs.

The two cross-field checks (a TP degree that shards the chosen model, a length within
its context) live in the field types, so they run wherever a lab declares the field,
and with ``validate_default`` they run on defaults too: a request that changes only
``model`` is checked against the defaults it keeps, and an error stays on its own
field. Each check reads the validated ``model``, so it must be declared first:
``ModelOnGpuParams`` does that.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field, ValidationInfo

from labs.base import LabParams
from labs.catalog.gpus import GpuId
from labs.catalog.memory import MAX_TENSOR_PARALLEL, check_context, check_tensor_parallel
from labs.catalog.models import ModelId


def _tp_shards_model(tp: int, info: ValidationInfo) -> int:
    model = info.data.get("model")  # absent when the model itself was rejected
    return check_tensor_parallel(model, tp) if model else tp


def _within_model_context(tokens: int, info: ValidationInfo) -> int:
    model = info.data.get("model")
    return check_context(model, tokens) if model else tokens


RegistryModel = Annotated[
    ModelId, Field(description="Model from the registry (shapes from its config.json).")
]
RegistryGpu = Annotated[GpuId, Field(description="GPU model (each of the tensor_parallel GPUs).")]
TensorParallel = Annotated[
    int,
    Field(
        ge=1,
        le=MAX_TENSOR_PARALLEL,
        validate_default=True,
        description="GPUs the model is split across (Megatron-style); must divide the attention "
        "heads, and divide or be a multiple of the KV heads.",
    ),
    AfterValidator(_tp_shards_model),
]
"""A tensor-parallel degree that can shard the params' ``model`` (``check_tensor_parallel``)."""
ContextTokens = Annotated[
    int,
    Field(
        ge=1,
        validate_default=True,
        description="Tokens per sequence, at most the model's context.",
    ),
    AfterValidator(_within_model_context),
]
"""A token count within the params' ``model`` context (``check_context``)."""


class ModelOnGpuParams(LabParams):
    """Params of a lab about a registry model on a GPU: ``model`` and ``gpu`` come first,
    so ``TensorParallel`` and ``ContextTokens`` fields declared after them are checked
    against the model. A lab changes a default by redeclaring the field with the same
    type, e.g. ``model: RegistryModel = "llama-3.1-8b"`` (the field keeps its place)."""

    model: RegistryModel = "llama-3.1-70b"
    gpu: RegistryGpu = "h100"

"""Lab ``tensor-sensitivity``: the paired test — which tensors need more bits?

Quantize one unit at a time (one tensor, one tensor kind across all layers, or
one whole layer) on the same held-out tokens, rank the units by the KL divergence
they cause, then build the mixed recipe the ranking suggests (the ``top_k`` most
sensitive units in ``high_format``, the rest in ``format``) and put it on a
size-versus-KL plot beside uniform formats.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events and the headline tiles.
"""

from __future__ import annotations

from labs.base import ChoiceOutput, Lab, NeedsGPU
from labs.lm import spec
from labs.tensor_sensitivity.compute import run
from labs.tensor_sensitivity.model import TensorSensitivityParams, TensorSensitivityResult
from labs.tensor_sensitivity.present import concept, headline, present

__all__ = ["LAB", "TensorSensitivityParams", "TensorSensitivityResult"]

LAB = Lab(
    id="tensor-sensitivity",
    title="Which tensors need more bits?",
    summary="The paired test: quantize one tensor (or tensor kind, or layer) at a time on the "
    "same held-out tokens, rank them by the KL divergence they cause, and compare the mixed "
    "recipe the ranking suggests with uniform formats on a size-vs-KL plot.",
    needs_gpu=NeedsGPU.preferred,
    params=TensorSensitivityParams,
    run=run,
    present=present,
    time_limit_s=600.0,
    memory_limit_mb=4096,
    wide_ops=True,
    headline=headline,
    choice_outputs=(
        ChoiceOutput(
            key="most_sensitive_kind",
            label="Most sensitive kind of weight",
            options=spec.KINDS,
            ties_key="most_sensitive_ties",
        ),
    ),
    concept=concept,
)

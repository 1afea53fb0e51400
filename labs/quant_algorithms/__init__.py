"""Lab ``quant-algorithms``: round-to-nearest vs GPTQ vs AWQ on a real model.

The same format (default int4, groups of 128) reached three ways: plain
round-to-nearest (RTN); GPTQ, which rounds column by column and pushes each
error onto the columns still to come using calibration activations; AWQ, which
scales salient input channels up before rounding. GPTQ and AWQ calibrate on
``calibration_tokens`` of the training split (``calibration.txt``); every
method is judged on both the calibration text and the held-out text, because a
method that only looks good on its calibration data has overfitted it.

``model`` holds the parameters and the result (no torch), ``compute`` the run,
``present`` the page's events, the headline tiles, the finding and the review question.
"""

from __future__ import annotations

from typing import get_args

from labs.base import ChoiceOutput, Lab, NeedsGPU
from labs.quant_algorithms.compute import run
from labs.quant_algorithms.model import Method, QuantAlgorithmsParams, QuantAlgorithmsResult
from labs.quant_algorithms.present import present, quant_algorithms, quant_algorithms_concept

__all__ = ["LAB", "Method", "QuantAlgorithmsParams", "QuantAlgorithmsResult"]

LAB = Lab(
    id="quant-algorithms",
    title="Round-to-nearest, GPTQ and AWQ",
    summary="Reach the same 4-bit format three ways — round-to-nearest, GPTQ's error feedback "
    "and AWQ's activation-aware scaling — calibrate on training text and judge on held-out "
    "text, and see which error each method removes.",
    needs_gpu=NeedsGPU.preferred,
    params=QuantAlgorithmsParams,
    run=run,
    present=present,
    time_limit_s=900.0,
    memory_limit_mb=4096,
    wide_ops=True,
    headline=quant_algorithms,
    choice_outputs=(
        ChoiceOutput(
            key="best_method",
            label="Method with the lowest held-out KL",
            options=get_args(Method),
            ties_key="best_method_ties",
        ),
    ),
    concept=quant_algorithms_concept,
)

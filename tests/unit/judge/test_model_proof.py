"""labs.judge.model_proof: the learner's Q8_0 quantizer on every decoder linear of the
shipped model, judged by KL and top-1 beside labs.quant's q8_0."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from labs.judge.kit import CallResult, load_exercise, run_locally
from labs.judge.model_proof import ProofError, model_proof, q8_0_values
from labs.quant import quantize

ROOT = Path(__file__).resolve().parents[3]
WRONG = Path(__file__).parent / "wrong"
SMALL = {"eval_tokens": 512, "context": 128}  # four windows: enough to tell models apart


def test_q8_0_values_reads_labs_quant_bytes_exactly_and_refuses_a_bad_length():
    x = torch.randn(1000, generator=torch.Generator().manual_seed(0))
    q = quantize(x, "q8_0")
    assert torch.equal(q8_0_values(q.to_bytes(), 1000), q.dequantize())
    with pytest.raises(ProofError, match="Q8_0 needs 1088"):
        q8_0_values(q.to_bytes()[:-1], 1000)


def test_the_reference_solution_gives_the_reference_model_and_a_mistake_shows():
    ex = load_exercise(ROOT / "content/exercises/q8_0-quantize")
    right = model_proof(ex.function, "q8_0", lambda calls: run_locally(ex.solution, calls), **SMALL)
    assert right.tensors == right.identical_tensors == 4 * 7
    assert right.learner == right.reference
    assert 0 < right.reference["kl_divergence"] < 0.01 and right.reference["top1_agreement"] > 0.9

    wrong_code = (WRONG / "q8_0-quantize_fp16_first.py").read_text()
    wrong = model_proof(ex.function, "q8_0", lambda calls: run_locally(wrong_code, calls), **SMALL)
    assert wrong.identical_tensors < wrong.tensors
    assert wrong.learner["kl_divergence"] != wrong.reference["kl_divergence"]
    assert wrong.reference == right.reference


def test_a_failing_or_undecodable_learner_is_a_proof_error():
    with pytest.raises(ProofError, match="your function failed on model.layers.0"):
        model_proof(
            "quantize", "q8_0", lambda calls: [CallResult(None, "ValueError: no", 0.0)] * len(calls)
        )
    with pytest.raises(ProofError, match="expected bytes, got a list"):
        model_proof("quantize", "q8_0", lambda calls: [CallResult([1], None, 0.0)] * len(calls))

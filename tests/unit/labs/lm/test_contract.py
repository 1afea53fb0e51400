"""The evaluation contract, checked by an evaluation that uses no lowbit code.

transformers loads the shipped model, tokenizers encodes heldout.txt, the gguf
package (llama.cpp's own Python quantizer) makes the q8_0 weights; perplexity is
computed here from the contract's words. model-quality must agree within 1 %.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from tests.unit.labs.helpers import run_lab

MODEL = Path(__file__).resolve().parents[4] / "labs" / "lm" / "lowbit-tiny"
EVAL_TOKENS = 1024
CONTEXT = 256
LINEARS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def independent_perplexity(q8_0: bool) -> float:
    from gguf import GGMLQuantizationType, quants
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
    if q8_0:
        for name, mod in model.named_modules():
            if name.startswith("model.layers.") and name.endswith(LINEARS):
                w = mod.weight.detach().numpy().astype(np.float32)
                packed = quants.quantize(w, GGMLQuantizationType.Q8_0)
                deq = quants.dequantize(packed, GGMLQuantizationType.Q8_0)
                mod.weight.data = torch.from_numpy(np.ascontiguousarray(deq)).float()
    tok = Tokenizer.from_file(str(MODEL / "tokenizer.json"))
    ids = tok.encode(
        (MODEL / "heldout.txt").read_text(encoding="utf-8"), add_special_tokens=False
    ).ids
    ids = ids[:EVAL_TOKENS]
    n = len(ids) // CONTEXT
    x = torch.tensor(ids[: n * CONTEXT]).view(n, CONTEXT)
    with torch.no_grad():
        logits = model(input_ids=x).logits[:, :-1].float()
    nll = torch.nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), x[:, 1:].reshape(-1)
    )
    return math.exp(float(nll))


@pytest.fixture(scope="module")
def q8_result():
    torch.set_num_threads(1)
    res, _ = run_lab(
        "model-quality", {"format": "q8_0", "eval_tokens": EVAL_TOKENS, "context": CONTEXT}
    )
    return res


def test_baseline_perplexity_matches_an_independent_evaluation(q8_result) -> None:
    ref = independent_perplexity(q8_0=False)
    assert q8_result.baseline_perplexity == pytest.approx(ref, rel=0.01)


def test_q8_0_perplexity_matches_llama_cpps_quantizer(q8_result) -> None:
    ref = independent_perplexity(q8_0=True)
    assert q8_result.perplexity == pytest.approx(ref, rel=0.01)


def test_the_model_has_learned_its_corpus(q8_result) -> None:
    # Far below the vocabulary size (4096), and q8_0 is near-lossless.
    assert q8_result.baseline_perplexity < 100
    assert q8_result.kl_divergence < 0.01
    assert q8_result.top1_agreement > 0.95
    assert q8_result.bits_per_weight == pytest.approx(8.5)
    assert q8_result.predicted_tokens == (EVAL_TOKENS // CONTEXT) * (CONTEXT - 1)

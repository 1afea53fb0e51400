"""app.content.audit_rules: each rule fails what issue 23's audit found and passes the fix.

The "old" prompts and sentences are the ones the audit found in the content; each
now fails ``lowbit content check``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.content import ContentError, load_catalogue
from app.content import audit_rules as rules
from app.settings import ROOT
from labs.registry import lab_ids
from tests.factories import DEPTH_TEXT, make_content, write_card


@pytest.mark.parametrize(
    "prompt",
    [
        "What SQNR does the block-quantize lab report for q4_1 on its normal tensor, seed 0?",
        "The kv-capacity lab gives Mistral 7B (int4 weights) on an L4 117,968 tokens of bf16 KV. "
        "How many tokens does it report with fp8 KV?",
        "What whole-model decode speed-up bound over BF16 does the lab give for that checkpoint?",
        "For comparison, what does the registry's int4 format give for Qwen2.5 72B, in GB?",
        "The fp8-savings lab's decode step for Llama 3.1 8B bf16 on an H100 at batch 32: how many ms?",
        "At batch 8, how many GB of FP8 weights does a step read, per the same lab?",
        "The fp8-savings lab gives the FP8 weight bytes one decode step of Mixtral 8x7B reads at "
        "batch 1 (2 experts per layer). How many GB?",
        "At seq_len 4096 the T4 run needs 16.79 GB of 16. Which single changes bring it back under "
        "16 GB, according to the lab?",
    ],
)
def test_prompts_that_ask_for_a_labs_output_fail(prompt: str) -> None:
    assert rules.lab_output_prompt(prompt)


@pytest.mark.parametrize(
    "prompt",
    [
        # derivations from a number the prompt gives
        "In the reproducibility lab (seed 0, 100 classes, batch 1,024) the fp8 per-tensor model's "
        "top-1 agreement with fp32 is 0.953125. How many of the 1,024 predictions flipped?",
        "The lab's tiny Llama-style config has 2 layers, untied embeddings and bf16 weights. "
        "How many tensors does config.json imply?",
        "The kv-capacity lab gives Llama 3.1 8B 26,992 tokens. What is that in GiB of cache?",
        # predictions with the inputs given
        "Per-tensor INT4 gives the lab's Gaussian tensor 14.34 dB. Predict its SQNR, and why.",
        "Mistral 7B with int4 weights on an L4 has room for 117,968 tokens of bf16 KV cache. "
        "Predict the capacity of the same pool with an fp8 cache, to the block.",
        # no lab at all
        "What compute capability does an L40S report?",
        "How many MiB does torch.cuda.memory_reserved() report?",
    ],
)
def test_predictions_and_derivations_pass(prompt: str) -> None:
    assert not rules.lab_output_prompt(prompt)


@pytest.mark.parametrize(
    ("sentence", "needle"),
    [
        # sparsity-2-4.md before the fix
        (
            "vLLM supports 2:4 checkpoints produced by llm-compressor through its sparse CUTLASS "
            "kernels on supported GPUs.",
            "2:4 sparse",
        ),
        # a decimal is not a version
        ("vLLM runs 2:4 checkpoints with 0.25 bits of metadata per weight.", "2:4 sparse"),
        # kv-cache-quantization.md before the fix
        (
            "| on the fly | `calculate_kv_scales=True`: amax of the first batch / 448 |",
            "deprecated",
        ),
        # exl2.md before the fix
        ("Wrong engine: vLLM, TGI and llama.cpp do not load EXL2.", "--quantize exl2"),
        # marlin.md before the fix
        ("the whole model reads 5.70 GB instead of 16.06 GB per token: 3.23×, not 3.88×.", "2.82"),
        # kernel-fusion.md before the fix
        (
            "FlashAttention tiles Q, K and V and moves only O(seq × head_dim) bytes, so it is "
            "limited by compute.",
            "N²",
        ),
    ],
)
def test_old_claims_fail(sentence: str, needle: str) -> None:
    messages = rules.sentence_problems(sentence)
    assert any(needle in m for m in messages), messages


@pytest.mark.parametrize(
    "sentence",
    [
        "vLLM removed its compressed-tensors Sparse24 path in v0.19 (pull request #36799).",
        "Pin vLLM 0.18.x for a published compressed-tensors 2:4 checkpoint.",
        "calculate_kv_scales was deprecated in March 2026 and removed in July 2026.",
        "Text Generation Inference lists EXL2 among its pre-quantized formats.",
        "A step reads 4.65 GB instead of 15.01 GB: a bound of 3.23×.",
        "FlashAttention's extra memory is O(N); its HBM traffic is Θ(N²d²/M).",
        "It fits in 48 GB, but every layer now needs two all-reduces.",
    ],
)
def test_fixed_claims_pass(sentence: str) -> None:
    assert rules.sentence_problems(sentence) == []


def test_a_ratio_in_different_units_is_left_to_the_gib_rule() -> None:
    assert rules.ratio_problems("32 GiB instead of 16.06 GB: 2×") == []


def test_content_check_reports_a_recall_prompt_with_file_and_line(tmp_path: Path) -> None:
    content = make_content(tmp_path)
    body = "\n".join(f"## {d}\n\n{t.format(t='alpha')}\n" for d, t in DEPTH_TEXT.items())
    quiz = [
        {
            "id": "recall",
            "type": "numeric",
            "prompt": "What SQNR does the block-quantize lab report for q4_0?",
            "answer": 21.35,
            "tolerance": 0.5,
            "tolerance_mode": "abs",
            "unit": "dB",
            "explanation": "Measured.",
            "depth": 2,
        }
    ]
    write_card(content, "alpha", ["beta", "gamma"], body=body, quiz=quiz)
    with pytest.raises(ContentError) as err:
        load_catalogue(content, set())
    problems = [p for p in err.value.problems if "recall" in p.message]
    assert problems and problems[0].path.endswith("alpha.md"), err.value.problems
    source = (content / "terms" / "alpha.md").read_text().splitlines()
    assert "id: recall" in source[problems[0].line - 1]


def test_the_real_content_passes_every_audit_rule() -> None:
    cat = load_catalogue(ROOT / "content", lab_ids())
    assert rules.check(cat) == []

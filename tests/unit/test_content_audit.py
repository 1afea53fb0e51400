"""Issue 15's named errors: each stays fixed, checked against code where code decides.

The generic checks (facts, ``app.content.rules``) cover the kinds of error; these
tests pin the specific claims the audit named, so a rewrite cannot bring them back.
"""

from __future__ import annotations

import re
from functools import cache

import pytest

from app.content import Catalogue, load_catalogue
from app.settings import ROOT
from labs.catalog import facts
from labs.catalog.facts import claims
from labs.catalog.gpus import get_gpu
from labs.registry import lab_ids

HBM_STACK_BITS = 1024


@cache
def catalogue() -> Catalogue:
    return load_catalogue(ROOT / "content", lab_ids())


def text(slug: str) -> str:
    cat = catalogue()
    owner = cat.terms.get(slug) or cat.lessons[slug]
    return owner.source


def test_fits_h200_is_keyed_by_the_driver_reported_bytes() -> None:
    item = catalogue().quiz_item("term:large-language-model", "fits-h200")
    assert item is not None and item.fact is not None
    fits = facts.evaluate(item.fact.fn, item.fact.args)
    assert fits == 1 and item.answer == 1 and item.choices[1].startswith("Yes")
    for slug in ("large-language-model", "quantization", "smoothquant"):
        body = text(slug)
        assert "more than the 141 GB of an H200" not in body
        assert "if it fitted at all" not in body
        assert "instead of nothing" not in body


def test_two_h100s_hold_the_70b_in_bf16() -> None:
    assert facts.evaluate(
        "weights_fit_on_gpu",
        {"model": "llama-3.1-70b", "weight_format": "bf16", "gpu": "h100", "tensor_parallel": 2},
    )
    body = text("inference")
    assert "more than two 80 GB GPUs" not in body and "160 GB, still short" not in body
    assert "4 × H100" not in text("large-language-model")


def test_hbm3e_row_gives_the_h200_its_own_pin_rate() -> None:
    h200 = get_gpu("h200")
    stacks = 6
    pin_gbps = h200.bandwidth_bytes_per_s * 8 / (stacks * HBM_STACK_BITS) / 1e9
    assert pin_gbps == pytest.approx(6.25)
    row = next(line for line in text("hbm").splitlines() if line.startswith("| HBM3e |"))
    assert "6.25 Gb/s in the H200" in row
    assert not re.search(r"\| about 9–10 Gb/s \| about 1\.2 TB/s \| H200 \|", row)


def test_jacob_et_al_is_affine_for_both_operands() -> None:
    body = text("quantization")
    assert "Weights are symmetric, and activations carry a zero-point." not in body
    assert "affine for weights and activations alike" in body


def test_symmetric_weights_claim_is_scoped_to_integer_w8a8() -> None:
    body = text("dot-product-scales")
    assert "the reason weight quantizers are usually symmetric" not in body
    assert "integer W8A8 GEMMs" in body and "zero_point=True" in body


def test_kv_capacity_says_approximates_and_names_both_simplifications() -> None:
    body = text("kv-capacity")
    assert "reproduces vLLM's accounting" not in body
    assert "approximates vLLM's accounting" in body
    assert "capacity_basis: nvidia-smi" in body and "profiling forward pass" in body


@pytest.mark.parametrize(
    ("owner", "item_id", "learner_answer"),
    [
        ("term:dynamic-range", "e4m3-min-normal", 0.0156),
        ("lesson:deriving-a-scale", "one-outlier-tensor", 0.2),
        ("lesson:deriving-a-scale", "int8-scale", 0.0591),
    ],
)
def test_quiz_keys_accept_a_rounded_right_answer(
    owner: str, item_id: str, learner_answer: float
) -> None:
    from app.content.quiz import Numeric

    item = catalogue().quiz_item(owner, item_id)
    assert isinstance(item, Numeric)
    assert item.within(learner_answer)


def test_int4_tp2_reason_is_the_head_count_not_oddness() -> None:
    item = catalogue().quiz_item("lesson:per-rank-fit", "int4-tp2")
    assert item is not None
    assert "231 is odd, so no TP size above 1 splits it" not in item.explanation
    assert "64 attention heads" in item.explanation
    assert claims.largest_block_aligned_tensor_parallel("qwen2.5-72b", "int4") == 1


def test_best_per_bit_describes_the_labs_element_outliers() -> None:
    item = catalogue().quiz_item("lesson:half-the-footprint", "best-per-bit")
    assert item is not None
    assert "outlier channels" not in item.prompt and "scattered element outliers" in item.prompt

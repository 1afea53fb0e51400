"""Issue 20, items 3–5 and 12: each model lab on the shipped model ends in results with
their 95 % intervals, a winner a learner can predict, the baseline beside each tile,
and sentences computed from the result."""

from __future__ import annotations

import re

import pytest
import torch

from labs.lm import spec
from tests.unit.labs.helpers import as_lab, run_lab

SMALL = {"eval_tokens": 512}
# "0.0042 ± 0.0006", or a lopsided interval's ends: "0.0024 nats (95 % 0 to 0.0099)"
PLUS_MINUS = re.compile(r"\d ± \d|\(95 % [\d.]+ to [\d.,]+\)")


@pytest.fixture(autouse=True)
def _one_thread():
    torch.set_num_threads(1)


def _tiles(lab: str, result) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {t.label: t for t in as_lab(lab).tiles(result.model_dump(mode="json"))}


def _inside(iv: list[float], value: float) -> bool:
    return iv[0] <= value <= iv[1] and iv[0] < iv[1]


def test_model_quality_tiles_are_results_with_intervals_and_baselines() -> None:
    res, events = run_lab("model-quality", {**SMALL, "format": "q4_0"})
    assert _inside(res.kl_divergence_interval, res.kl_divergence)
    assert _inside(res.top1_agreement_interval, res.top1_agreement)
    tiles = _tiles("model-quality", res)
    assert list(tiles) == [
        "KL from the unquantized model",
        "Top-1 agreement",
        "Perplexity",
        "Weights stored",
    ]
    assert all(PLUS_MINUS.search(tiles[k].text) for k in list(tiles)[:3])
    assert "unquantized:" in tiles["Perplexity"].means
    assert PLUS_MINUS.search(tiles["Perplexity"].means)
    assert "32 bits" in tiles["Weights stored"].means
    assert res.perplexity_vs_baseline["windows"] == 2
    assert "q4_0 stores the weights in 4.5 bits each" in res.finding
    assert "noise of 2 paired windows" in res.finding
    # the per-weight figure groups its 28 tensors by kind, not 28 bars of dotted names
    (fig,) = [d for k, d in events if k == "plot"]
    assert "down_proj" in fig["svg"] and "lowest and highest layer" in fig["svg"]
    assert "model.layers" not in fig["svg"] and "<image" not in fig["svg"]


def test_kv_quant_shows_top1_the_baseline_and_the_bytes_saved() -> None:
    res, events = run_lab("kv-quant", SMALL)
    tiles = _tiles("kv-quant", res)
    assert "Top-1 agreement" in tiles and "full-precision cache:" in tiles["Perplexity"].means
    # lowbit-tiny: 4 layers × 2 KV heads × 64 dims × K and V × 2 bytes in bf16
    assert res.baseline_kv_bytes_per_token == 4 * 2 * 64 * 2 * 2
    saved = tiles["Cache bytes saved per token"]
    assert saved.value == res.baseline_kv_bytes_per_token - res.kv_bytes_per_token > 0
    assert all(len(b.kl_interval) == 2 for b in res.kl_by_position)
    assert set(res.position_trend) >= {"inside_noise", "low", "high"}
    assert ("inside" if res.position_trend["inside_noise"] else "outside") in res.finding


def test_tensor_sensitivity_names_a_kind_and_judges_the_mix_against_its_own_base() -> None:
    res, events = run_lab("tensor-sensitivity", SMALL)
    assert res.most_sensitive_kind == res.ranking[0].unit and res.most_sensitive_kind in spec.KINDS
    assert res.most_sensitive_kind in res.most_sensitive_ties
    assert res.base.label == "all int4 per-channel" and res.uniform[0].label == "all q8_0"
    assert res.base.bits_per_weight < res.mixed.bits_per_weight < res.uniform[0].bits_per_weight
    t = (res.mixed.bits_per_weight - res.base.bits_per_weight) / (
        res.uniform[0].bits_per_weight - res.base.bits_per_weight
    )
    line = res.base.kl_divergence + t * (res.uniform[0].kl_divergence - res.base.kl_divergence)
    assert res.mixed_worth_its_bits == (res.mixed.kl_divergence < line)
    assert res.finding.startswith(f"{res.most_sensitive_kind} is the most sensitive kind")
    tiles = _tiles("tensor-sensitivity", res)
    assert tiles["Most sensitive kind"].text == res.most_sensitive_kind
    assert not {"Eval tokens", "Seconds", "Baseline perplexity"} & set(tiles)
    size_plot = [d for k, d in events if k == "plot" and d["title"] == "size vs KL divergence"]
    assert "all int4 per-channel" in size_plot[0]["svg"]  # points are labelled


def test_quant_algorithms_names_the_winner_and_why_awq_gains_little() -> None:
    res, _ = run_lab("quant-algorithms", SMALL)
    kls = {m: r.heldout.kl_divergence for m, r in res.methods.items()}
    assert res.best_method == min(kls, key=kls.__getitem__)
    assert res.best_method in res.best_method_ties
    assert res.methods["rtn"].vs_rtn is None and res.methods["awq"].vs_rtn is not None
    assert res.outliers is not None and res.outliers["max_over_median"] < 10
    assert "few salient channels for AWQ's scaling to protect" in res.finding
    awq, vs = res.methods["awq"].heldout.kl_divergence, res.methods["awq"].vs_rtn
    if vs["inside_noise"] or vs["difference"] >= 0:
        assert "no better than round-to-nearest beyond the noise" in res.finding
    elif res.methods["gptq"].heldout.kl_divergence < awq:
        assert "it gains less than GPTQ" in res.finding
    else:
        assert "it has the lowest error of the methods run here" in res.finding
    assert "calibration text and" in res.finding
    tiles = _tiles("quant-algorithms", res)
    assert tiles["Lowest held-out KL"].exact == res.best_method
    assert PLUS_MINUS.search(tiles["GPTQ: held-out KL"].text)

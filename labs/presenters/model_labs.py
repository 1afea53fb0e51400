"""What the model labs end in: headline tiles that are results with their baseline
beside them, the two or three sentences computed from a result (``finding``), and the
concept a wrong prediction comes back as in review.

Every function reads a stored result (JSON), so pages of old runs keep working, and
imports no torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Concept
from labs.presenters.intervals import interval_tile, noise_words, pm, relative
from labs.viz.tiles import Tile, readable, readable_bytes, tile

Result = Mapping[str, Any]
# bits per weight of the comparison format in model-quality's review question
Q8_0_BITS = 8.5
Q4_0_BITS = 4.5


def _ppl_change(r: Result) -> str:
    diff = r.get("perplexity_vs_baseline")
    words = noise_words(diff, "the change")
    return (
        f"perplexity goes from {pm(r['baseline_perplexity'], r.get('baseline_perplexity_interval'))} "
        f"to {pm(r['perplexity'], r.get('perplexity_interval'))} "
        f"({relative(r['perplexity'], r['baseline_perplexity'])}); {words}"
    )


# --- model-quality -------------------------------------------------------------------


def model_quality(r: Result) -> list[Tile]:
    return [
        interval_tile(
            "KL from the unquantized model",
            r,
            "kl_divergence",
            "nats",
            means=f"0 for the unquantized model; 95 % interval over {r['windows']} windows",
        ),
        interval_tile(
            "Top-1 agreement",
            r,
            "top1_agreement",
            "",
            scale=100,
            means="share of positions with the same next token; 100 % unquantized",
        ),
        interval_tile(
            "Perplexity",
            r,
            "perplexity",
            means=f"unquantized: {pm(r['baseline_perplexity'], r.get('baseline_perplexity_interval'))}"
            " (lower is better)",
        ),
        tile(
            "Weights stored",
            r["weight_bytes"],
            "bytes",
            key="weight_bytes",
            means=f"{readable(r['bits_per_weight'])} bits per weight; unquantized "
            f"{readable_bytes(r['baseline_weight_bytes'])} at "
            f"{readable(r['baseline_bits_per_weight'])} bits",
        ),
    ]


def model_quality_finding(r: Result) -> str:
    smaller = r["baseline_weight_bytes"] / max(1, r["weight_bytes"])
    changed = 100 * (1 - r["top1_agreement"])
    return (
        f"{r['format']} stores the weights in {readable(r['bits_per_weight'])} bits each, "
        f"{readable(smaller)}× smaller than the unquantized model's "
        f"{readable(r['baseline_bits_per_weight'])} bits. "
        f"It moves the next-token distribution by {pm(r['kl_divergence'], r.get('kl_divergence_interval'), 'nats')} "
        f"of KL and changes the top token at {readable(changed, 2)} % of positions. "
        f"Over these {r['windows']} windows {_ppl_change(r)}"
        + (
            ": perplexity cannot tell the two models apart here, while KL and top-1 "
            "measure the change position by position."
            if (r.get("perplexity_vs_baseline") or {}).get("inside_noise")
            else "."
        )
    )


def model_quality_concept(r: Result, metric: str) -> Concept | None:
    bits = float(r["bits_per_weight"])
    other, other_bits = ("q8_0", Q8_0_BITS) if bits < Q8_0_BITS - 0.5 else ("q4_0", Q4_0_BITS)
    fewer_is_run = bits < other_bits
    choices = (
        f"{r['format']} ({readable(bits)} bits per weight)",
        f"{other} ({readable(other_bits)} bits per weight)",
        "Neither: the KL depends on the text, not on the weights",
    )
    return Concept(
        prompt=f"The same model is quantized to {r['format']} and, separately, to {other}. "
        "Which one moves the next-token distribution further from the unquantized model "
        "(the larger KL divergence), and why?",
        choices=choices,
        answer=0 if fewer_is_run else 1,
        explanation="Fewer bits per weight mean coarser steps, so larger rounding errors in "
        "every weight, and those errors add up through the layers into a larger change of "
        f"the output. Your run: {r['format']} gave KL "
        f"{pm(r['kl_divergence'], r.get('kl_divergence_interval'), 'nats')}.",
    )


# --- kv-quant -------------------------------------------------------------------------


def kv_quant(r: Result) -> list[Tile]:
    saved = r["baseline_kv_bytes_per_token"] - r["kv_bytes_per_token"]
    return [
        interval_tile(
            "KL from the full-precision cache",
            r,
            "kl_divergence",
            "nats",
            means="0 with a bf16 cache; 95 % interval over windows",
        ),
        interval_tile(
            "Top-1 agreement",
            r,
            "top1_agreement",
            scale=100,
            means="same next token as with the full-precision cache; 100 % there",
        ),
        interval_tile(
            "Perplexity",
            r,
            "perplexity",
            means=f"full-precision cache: {pm(r['baseline_perplexity'], r.get('baseline_perplexity_interval'))}",
        ),
        tile(
            "Cache bytes saved per token",
            saved,
            "bytes",
            key="kv_bytes_per_token",
            means=f"{readable(r['kv_bytes_per_token'])} bytes per token vs "
            f"{readable(r['baseline_kv_bytes_per_token'])} in bf16 "
            f"({readable(r['kv_bits_per_value'])} bits per cached value)",
        ),
    ]


def kv_quant_finding(r: Result) -> str:
    saved = 100 * (1 - r["kv_bytes_per_token"] / r["baseline_kv_bytes_per_token"])
    bins = r["kl_by_position"]
    trend = noise_words(r.get("position_trend"), "the change from the first to the last positions")
    return (
        f"The {r['kv_format']} cache ({r['granularity']}) stores {readable(r['kv_bits_per_value'])} bits "
        f"per cached value, {readable(saved, 2)} % fewer bytes than bf16. It moves the "
        f"next-token distribution by {pm(r['kl_divergence'], r.get('kl_divergence_interval'), 'nats')} "
        f"of KL and keeps the top token at {pm(r['top1_agreement'], r.get('top1_agreement_interval'), '%', 100)}; "
        f"{_ppl_change(r)}. KL {'rises' if bins[-1]['kl_divergence'] > bins[0]['kl_divergence'] else 'falls'} "
        f"from {readable(bins[0]['kl_divergence'])} nats at positions "
        f"{bins[0]['start']}–{bins[0]['stop']} to {readable(bins[-1]['kl_divergence'])} at "
        f"{bins[-1]['start']}–{bins[-1]['stop']}: {trend}."
    )


def kv_quant_concept(r: Result, metric: str) -> Concept | None:
    return Concept(
        prompt=f"A KV cache is quantized to {r['kv_format']} with one scale per tensor, and "
        "again with one scale per token. Which one changes the model's output more, and why?",
        choices=(
            "One scale per tensor: the largest value of any token sets the step for all",
            "One scale per token: more scales add more rounding",
            "Neither: the cache holds activations, which quantization cannot change",
        ),
        answer=0,
        explanation="A scale must cover the largest value it serves. Keys and values of a "
        "few tokens are far larger than the rest, so a per-tensor scale gives every other "
        "token a coarse step; per-token scales follow each token's own range. Your run "
        f"({r['granularity']}) gave KL {pm(r['kl_divergence'], r.get('kl_divergence_interval'), 'nats')}.",
    )


# --- tensor-sensitivity -------------------------------------------------------------


def _top_and_least(r: Result) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    ranking = r["ranking"]
    return ranking[0], ranking[-1]


def tensor_sensitivity(r: Result) -> list[Tile]:
    top, least = _top_and_least(r)
    mixed, base = r["mixed"], r["base"]
    return [
        Tile(
            label=f"Most sensitive {r['unit']}",
            text=top["unit"],
            exact=top["unit"],
            means=f"KL {pm(top['kl_divergence'], top.get('kl_interval'), 'nats')} alone in "
            f"{r['format']}; least: {least['unit']} {readable(least['kl_divergence'])}",
            key="ranking.0.unit",
        ),
        tile(
            "Mixed recipe: KL",
            mixed["kl_divergence"],
            "nats",
            key="mixed.kl_divergence",
            means=f"at {readable(mixed['bits_per_weight'])} bits; all in {r['format']}: "
            f"{readable(base['kl_divergence'])} at {readable(base['bits_per_weight'])} bits",
        ),
        *[
            tile(
                f"{p['label'].capitalize()}: KL",
                p["kl_divergence"],
                "nats",
                key=f"uniform.{i}.kl_divergence",
                means=f"at {readable(p['bits_per_weight'])} bits per weight",
            )
            for i, p in enumerate(r["uniform"][:2])
        ],
        Tile(
            label="Mix worth its bits?",
            text="yes" if r["mixed_worth_its_bits"] else "no",
            exact=str(r["mixed_worth_its_bits"]),
            means="below the straight line from its base to uniform "
            f"{r['high_format']} on the size-vs-KL plot"
            if r["mixed_worth_its_bits"]
            else f"on or above the line from its base to uniform {r['high_format']}",
            key="mixed_worth_its_bits",
            tone="" if r["mixed_worth_its_bits"] else "warn",
        ),
    ]


def tensor_sensitivity_finding(r: Result) -> str:
    top, least = _top_and_least(r)
    mixed, base = r["mixed"], r["base"]
    ties = [u for u in r["most_sensitive_ties"] if u != top["unit"]]
    tie_words = (
        f"; {', '.join(ties)} cannot be told from it within the noise"
        if ties
        else ", clear of the runner-up beyond the noise"
    )
    extra_bits = mixed["bits_per_weight"] - base["bits_per_weight"]
    cut = relative(mixed["kl_divergence"], base["kl_divergence"])
    worth = (
        "more than a straight mix of the two uniform formats would: the ranking found "
        "where bits matter"
        if r["mixed_worth_its_bits"]
        else "no more than spending the same bits evenly would: here the mix is not worth its bits"
    )
    return (
        f"{top['unit']} is the most sensitive {r['unit']}: alone in {r['format']} it adds KL "
        f"{pm(top['kl_divergence'], top.get('kl_interval'), 'nats')}, "
        f"{readable(top['kl_divergence'] / max(least['kl_divergence'], 1e-30), 2)}× the least "
        f"sensitive ({least['unit']}){tie_words}. The mixed recipe "
        f"({mixed['label'].removeprefix('mixed: ')}, the rest {r['format']}) costs "
        f"{readable(extra_bits, 2)} bits per weight more than all-{r['format']} and changes its "
        f"KL by {cut} ({readable(base['kl_divergence'])} → {readable(mixed['kl_divergence'])} nats), "
        f"{worth}."
    )


def tensor_sensitivity_concept(r: Result, metric: str) -> Concept | None:
    top, least = _top_and_least(r)
    return Concept(
        prompt="Which tells you how sensitive a kind of weight is to quantization?",
        choices=(
            "The KL divergence of the model's output with only that kind quantized",
            "The SQNR of that kind's quantized weights",
            "The number of parameters of that kind",
        ),
        answer=0,
        explanation="What matters is what an error does downstream: a weight whose errors "
        "pass into every later layer, or into the residual stream unscaled, can hurt more "
        "than a noisier one elsewhere. Your run: "
        f"{top['unit']} (SQNR {readable(top['sqnr_db'] or 0)} dB) caused KL "
        f"{readable(top['kl_divergence'])}, {least['unit']} (SQNR "
        f"{readable(least['sqnr_db'] or 0)} dB) {readable(least['kl_divergence'])} nats.",
    )

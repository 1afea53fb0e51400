"""quant-algorithms' page: each method's held-out KL, the calibration vs held-out
table and the bars; its verdict: the tiles (the winner, each method's held-out KL with its
interval, the activation statistic AWQ depends on), three sentences computed from the
result and the concept a wrong guess comes back as. Reads the stored result; no torch."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Concept, Context
from labs.lm.interval_text import interval_tile, noise_phrase, pm, relative
from labs.quant_algorithms.model import QuantAlgorithmsParams, QuantAlgorithmsResult
from labs.viz.tiles import Tile, readable, tile

Result = Mapping[str, Any]
# What AWQ exploits: in billion-parameter LLMs a few input channels are ~100× the median
# (AWQ paper, Lin et al. 2024, fig. 2; LLM.int8(), Dettmers et al. 2022). Below this
# ratio there are too few salient channels for scaling to protect.
OUTLIER_RATIO_LLM = 100
FEW_OUTLIERS_BELOW = 10

METHOD_NAMES = {"rtn": "RTN", "gptq": "GPTQ", "awq": "AWQ"}


def _name(m: str) -> str:
    return METHOD_NAMES.get(m, m)


def quant_algorithms(r: Result) -> list[Tile]:
    methods = r["methods"]
    best = r["best_method"]
    tiles = [
        Tile(
            label="Lowest held-out KL",
            text=_name(best),
            exact=best,
            means=f"{pm(methods[best]['heldout']['kl_divergence'], methods[best]['heldout'].get('kl_divergence_interval'), 'nats')}"
            + (
                f"; tied within the noise: {', '.join(_name(m) for m in r['best_method_ties'] if m != best)}"
                if len(r["best_method_ties"]) > 1
                else ""
            ),
            key="best_method",
        )
    ]
    for m, res in methods.items():
        held = res["heldout"]
        vs = res.get("vs_rtn")
        means = (
            f"{relative(held['kl_divergence'], methods['rtn']['heldout']['kl_divergence'])} vs RTN, "
            + ("inside the noise" if vs["inside_noise"] else "outside the noise")
            if vs and m != "rtn"
            else "round-to-nearest: the baseline"
        )
        tiles.append(
            interval_tile(
                f"{_name(m)}: held-out KL", held, "kl_divergence", "nats", means=means
            ).model_copy(update={"key": f"methods.{m}.heldout.kl_divergence"})
        )
    out = r.get("outliers")
    if out:
        tiles.append(
            tile(
                "Largest activation channel",
                out["max_over_median"],
                "× median",
                key="outliers.max_over_median",
                means=f"billion-parameter LLMs: ~{OUTLIER_RATIO_LLM}×; what AWQ exploits",
            )
        )
    return tiles


def quant_algorithms_finding(r: Result) -> str:
    """Three sentences: the winner (against RTN, with the noise), AWQ and why, and the
    calibration text against the held-out text."""
    methods, best = r["methods"], r["best_method"]
    held = methods[best]["heldout"]
    vs = methods[best].get("vs_rtn")
    against = (
        f", {relative(held['kl_divergence'], methods['rtn']['heldout']['kl_divergence'])} "
        f"against round-to-nearest, {noise_phrase(vs)}"
        if vs
        else ""
    )
    parts = [
        f"{_name(best)} has the lowest held-out KL, "
        f"{pm(held['kl_divergence'], held.get('kl_divergence_interval'), 'nats')}{against}."
    ]
    out = r.get("outliers")
    if out and "awq" in methods:
        sentence = _awq_sentence(r, out["max_over_median"])
        parts.append(sentence[:1].upper() + sentence[1:])
    ratio = r["baseline_calibration_perplexity"] / r["baseline_perplexity"]
    parts.append(
        f"The unquantized model's perplexity is {readable(r['baseline_calibration_perplexity'])} on "
        f"the calibration text and {readable(r['baseline_perplexity'])} on the held-out text "
        f"({readable(ratio, 2)}×): they are different documents, so a calibration KL says how "
        "a method fits what it saw and only the held-out KL how it generalises."
    )
    return " ".join(parts)


def _awq_sentence(r: Result, ratio: float) -> str:
    """Why AWQ did what it did: how unequal this model's activation channels are, and
    what AWQ gained over RTN (and against GPTQ) beyond the noise."""
    methods = r["methods"]
    awq, rtn, gptq = methods["awq"], methods.get("rtn"), methods.get("gptq")
    change = (
        f"AWQ changes the KL by "
        f"{relative(awq['heldout']['kl_divergence'], rtn['heldout']['kl_divergence'])} "
        "against round-to-nearest; "
        if rtn is not None
        else ""
    )
    start = (
        f"{change}this model's largest activation channel is {readable(ratio, 2)}× its median "
        f"(billion-parameter LLMs: ~{OUTLIER_RATIO_LLM}×), "
    )
    if ratio >= FEW_OUTLIERS_BELOW:
        return start + "so AWQ's scaling has salient channels to protect."
    start += "so there are few salient channels for AWQ's scaling to protect"
    vs = awq.get("vs_rtn")
    if rtn is not None and vs and (vs["inside_noise"] or vs["difference"] >= 0):
        return start + ": it does no better than round-to-nearest beyond the noise."
    if gptq is not None and gptq["heldout"]["kl_divergence"] < awq["heldout"]["kl_divergence"]:
        return start + (
            ", and it gains less than GPTQ, which corrects rounding errors whatever the "
            "activations look like."
        )
    return start + ", yet it has the lowest error of the methods run here."


def quant_algorithms_concept(r: Result, metric: str) -> Concept | None:
    out = r.get("outliers") or {}
    ratio = out.get("max_over_median")
    if ratio is not None and ratio < FEW_OUTLIERS_BELOW:
        return Concept(
            prompt=f"A model's largest activation channel is only {readable(ratio, 2)}× the "
            "median channel. Which method should gain least over round-to-nearest, and why?",
            choices=(
                "AWQ: it protects a few salient input channels, and there are hardly any",
                "GPTQ: it needs outlier channels to push errors onto",
                "Both gain the same: they use the same calibration text",
            ),
            answer=0,
            explanation="AWQ scales the input channels with large activations up before "
            "rounding; without outliers every channel matters alike and there is little to "
            "protect. GPTQ corrects each column's rounding error on the columns still to "
            f"come, whatever the activations look like. Your run: {_name(r['best_method'])} won.",
        )
    return Concept(
        prompt="Which method uses calibration activations to push each column's rounding "
        "error onto the columns not yet rounded?",
        choices=("GPTQ", "AWQ", "Round-to-nearest"),
        answer=0,
        explanation="GPTQ quantizes a weight matrix column by column and updates the "
        "remaining columns with the inverse Hessian of the layer inputs, so later columns "
        "absorb the error; AWQ rescales salient channels; RTN rounds each weight alone. "
        f"Your run: {_name(r['best_method'])} had the lowest held-out KL.",
    )


def present(r: QuantAlgorithmsResult, params: QuantAlgorithmsParams, ctx: Context) -> None:
    """Each method's held-out KL, the calibration vs held-out table and the bars."""
    from labs.viz.model_charts import bars_data, interval_bars

    fmt_label, results, best = r.format, r.methods, r.best_method
    for m, res in results.items():
        ctx.metric(f"{m}_kl", res.heldout.kl_divergence, "nats", f"{m}: held-out KL")
    methods = list(results)
    ctx.table(
        f"{fmt_label}: calibration vs held-out",
        ["method", "KL calibration", "KL held-out", "ppl calibration", "ppl held-out", "seconds"],
        [
            [
                m,
                res.calibration.kl_divergence,
                res.heldout.kl_divergence,
                res.calibration.perplexity,
                res.heldout.perplexity,
                res.seconds,
            ]
            for m, res in results.items()
        ],
    )
    ctx.plot(
        "held-out KL by method",
        interval_bars(
            methods,
            [results[m].heldout.kl_divergence for m in methods],
            [results[m].heldout.kl_divergence_interval for m in methods],
            title=f"{fmt_label}: KL on held-out text (lower is better)",
            value_label="KL divergence, nats per token",
            highlight=best,
        ),
        {
            "methods": methods,
            "calibration_kl": [results[m].calibration.kl_divergence for m in methods],
            "heldout_kl": [results[m].heldout.kl_divergence for m in methods],
            **bars_data(
                f"{fmt_label}: KL on held-out text",
                methods,
                [results[m].heldout.kl_divergence for m in methods],
                [results[m].heldout.kl_divergence_interval for m in methods],
                "KL divergence, nats per token (whiskers: 95 % interval)",
            ),
        },
        id="heldout-kl",
    )

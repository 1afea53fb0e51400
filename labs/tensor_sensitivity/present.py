"""tensor-sensitivity's page: ``present`` turns what ``run`` returned into events; the
verdict read from a stored result (headline tiles, finding, review question)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Concept, Context
from labs.lm.interval_text import pm, relative
from labs.tensor_sensitivity.model import (
    Point,
    Ranked,
    TensorSensitivityParams,
    TensorSensitivityResult,
)
from labs.viz.tiles import Tile, readable, tile

Stored = Mapping[str, Any]  # a stored result (JSON)


def _top_and_least(r: Stored) -> tuple[Mapping[str, Any], Mapping[str, Any]]:
    ranking = r["ranking"]
    return ranking[0], ranking[-1]


def finding(r: Stored) -> str:
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


def _present_ranking(ctx: Context, ranking: list[Ranked], title: str, fmt: str) -> None:
    from labs.viz.model_charts import bars_data, interval_bars
    from labs.viz.tiles import readable

    ctx.plot(
        "KL caused by each unit alone",
        interval_bars(
            [r.unit for r in ranking],
            [r.kl_divergence for r in ranking],
            [r.kl_interval for r in ranking],
            title=f"Each unit alone in {fmt} (most sensitive first)",
            value_label="KL divergence, nats per token",
            highlight=ranking[0].unit if ranking else None,
        ),
        {
            "units": [r.unit for r in ranking],
            "kl": [r.kl_divergence for r in ranking],
            **bars_data(
                f"Each unit alone in {fmt}",
                [r.unit for r in ranking],
                [r.kl_divergence for r in ranking],
                [r.kl_interval for r in ranking],
                "KL divergence, nats per token (whiskers: 95 % interval)",
            ),
        },
        id="ranking",
    )
    ctx.table(
        title,
        ["unit", "KL nats", "95 % interval", "Δ perplexity", "top-1 %", "SQNR dB"],
        [
            [
                r.unit,
                r.kl_divergence,
                " to ".join(readable(v) for v in r.kl_interval),
                r.perplexity_delta,
                100 * r.top1_agreement,
                r.sqnr_db,
            ]
            for r in ranking
        ],
    )


def _present_points(ctx: Context, uniform: list[Point], mixed: Point, base: Point) -> None:
    """The size-vs-KL plot: the mix, its base and the uniform formats, each named."""
    from labs.viz.model_charts import labelled_points

    points = [mixed, base, *uniform]
    ctx.plot(
        "size vs KL divergence",
        labelled_points(
            [(p.label, p.bits_per_weight, p.kl_divergence) for p in points],
            title="Bits per weight vs KL (dashed: the bits spent evenly)",
            x_label="bits per weight (decoder linears)",
            y_label="KL divergence, nats per token",
            line=(base.label, uniform[0].label) if uniform else None,
        ),
        {"points": [p.model_dump() for p in points]},
        id="size-vs-kl",
    )
    ctx.metric("mixed_kl_divergence", mixed.kl_divergence, "nats", "mixed recipe: KL")
    ctx.metric("base_kl_divergence", base.kl_divergence, "nats", f"{base.label}: KL")
    ctx.metric("mixed_bits_per_weight", mixed.bits_per_weight, "bits", "mixed recipe: bits/weight")


def present(r: TensorSensitivityResult, params: TensorSensitivityParams, ctx: Context) -> None:
    """The ranking (figure and table), then size against KL and its metrics."""
    title = f"sensitivity: one {r.unit} at a time in {r.format}"
    _present_ranking(ctx, r.ranking, title, r.format)
    _present_points(ctx, r.uniform, r.mixed, r.base)


def headline(r: Stored) -> list[Tile]:
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


def concept(r: Stored, metric: str) -> Concept | None:
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

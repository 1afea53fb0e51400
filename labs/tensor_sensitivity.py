"""Lab ``tensor-sensitivity``: the paired test — which tensors need more bits?

Quantize one unit at a time (one tensor, one tensor kind across all layers, or
one whole layer) on the same held-out tokens, rank the units by the KL divergence
they cause, then build the mixed recipe the ranking suggests (the ``top_k`` most
sensitive units in ``high_format``, the rest in ``format``) and put it on a
size-versus-KL plot beside uniform formats.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from labs.base import ChoiceOutput, Context, Lab, LabResult, NeedsGPU
from labs.lm import spec
from labs.lm.session import field_error
from labs.model_quality import WeightParams
from labs.presenters import model_labs

Unit = Literal["tensor", "kind", "layer"]
MAX_UNIFORM = 6


class TensorSensitivityParams(WeightParams):
    format: spec.FormatKey = Field(default="int4", description="The format each unit is tested in")
    granularity: spec.Granularity = Field(
        default="channel",
        description="For int8/int4/fp8: tensor, channel or a block size; default: the format's own",
    )
    eval_tokens: int = Field(
        default=1024,
        ge=16,
        le=131_072,
        title="Tokens evaluated",
        description="Held-out tokens evaluated (the first ones of the held-out text)",
    )
    unit: Unit = Field(
        default="kind",
        description="What is quantized at a time: one tensor, one kind (q_proj … down_proj) "
        "in every layer, or one whole layer",
    )
    high_format: spec.FormatKey = Field(
        default="q8_0",
        title="Format of the most sensitive",
        description="Format of the top_k most sensitive units in the mixed recipe",
    )
    top_k: int = Field(
        default=2, ge=0, le=64, title="Units given more bits", description="Units in high_format"
    )
    uniform: list[spec.FormatKey] = Field(
        default_factory=list,
        max_length=MAX_UNIFORM,
        title="More uniform formats",
        description="Uniform formats drawn beside the mixed recipe, its base (every weight "
        "in format) and uniform high_format, which are always drawn",
    )

    @model_validator(mode="after")
    def _check_high(self) -> TensorSensitivityParams:
        s = self.model_spec()
        names = s.linear_names(self.tensors)
        for where, f in [("high_format", self.high_format)] + [
            ("uniform", u) for u in self.uniform
        ]:
            problem = spec.block_problem(s, names, f, spec.BLOCK_SIZES[f])
            if problem:
                raise field_error(self, where, problem)
        return self


class Ranked(BaseModel):
    unit: str
    tensors: int
    kl_divergence: float = Field(
        description="Mean KL(p_ref ‖ p_q) in nats with only this unit quantized"
    )
    perplexity_delta: float
    top1_agreement: float
    sqnr_db: float | None = Field(description="SQNR of the unit's weights taken together")
    kl_interval: list[float] = Field(default_factory=list, description="95 % over windows")


class Point(BaseModel):
    label: str
    bits_per_weight: float
    weight_bytes: int
    kl_divergence: float
    perplexity: float


class TensorSensitivityResult(LabResult):
    model: str
    format: str
    unit: str
    device: str
    eval_tokens: int
    baseline_perplexity: float
    ranking: list[Ranked]
    most_sensitive_kind: str | None = Field(description="With unit kind: the top of the ranking")
    most_sensitive_ties: list[str] = Field(
        description="Units whose KL a paired comparison cannot tell from the top's"
    )
    mixed: Point
    base: Point = Field(description="Every weight in format: the mixed recipe's own base")
    high_format: str
    recipe: dict[str, str] = Field(description="Unit -> format in the mixed recipe")
    uniform: list[Point] = Field(description="Uniform high_format, then the extra formats")
    mixed_worth_its_bits: bool = Field(
        description="The mix lies below the straight line from its base to uniform high_format"
    )
    finding: str
    seconds: float


def units(names: list[str], unit: str) -> dict[str, list[str]]:
    """Group tensor names into the units tested one at a time."""
    groups: dict[str, list[str]] = {}
    for n in names:
        parts = n.split(".")  # model.layers.{i}.{self_attn|mlp}.{kind}
        key = {
            "tensor": n.removeprefix("model."),
            "kind": parts[-1],
            "layer": ".".join(parts[1:3]),
        }[unit]
        groups.setdefault(key, []).append(n)
    return groups


def _present_ranking(ctx: Context, ranking: list[Ranked], title: str, fmt: str) -> None:
    from labs.viz.model_charts import interval_bars
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
        {"units": [r.unit for r in ranking], "kl": [r.kl_divergence for r in ranking]},
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


def worth_its_bits(mixed: Point, base: Point, high: Point) -> bool:
    """The mix beats spending the same bits evenly: its KL lies below the straight line
    from its base to uniform ``high`` at its bits per weight."""
    span = high.bits_per_weight - base.bits_per_weight
    if span <= 0:
        return mixed.kl_divergence < min(base.kl_divergence, high.kl_divergence)
    t = (mixed.bits_per_weight - base.bits_per_weight) / span
    return mixed.kl_divergence < base.kl_divergence + t * (high.kl_divergence - base.kl_divergence)


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
    )
    ctx.metric("mixed_kl_divergence", mixed.kl_divergence, "nats", "mixed recipe: KL")
    ctx.metric("base_kl_divergence", base.kl_divergence, "nats", f"{base.label}: KL")
    ctx.metric("mixed_bits_per_weight", mixed.bits_per_weight, "bits", "mixed recipe: bits/weight")


def _rank(
    ev: Any,
    ctx: Context,
    params: TensorSensitivityParams,
    editor: Any,
    quantized: dict,
    groups: dict[str, list[str]],
    progress: Any,
) -> tuple[list[Ranked], dict[str, Any]]:
    """Quantize one unit at a time; the units ranked by KL, and each unit's totals."""
    import math

    from labs.lm import session

    fmt_label = spec.label(params.format, params.granularity)
    ranking, totals = [], {}
    for key, members in groups.items():
        for n in members:
            editor.set(n, quantized[n][0])
        start, span = progress()
        tot = totals[key] = session.score(ev, ctx, start, span, f"{key} in {fmt_label}")
        q = session.quality(tot, ev.base)
        err = sum(
            float((editor.original(n).double() - quantized[n][0].double()).pow(2).sum())
            for n in members
        )
        sig = sum(float(editor.original(n).double().pow(2).sum()) for n in members)
        ranking.append(
            Ranked(
                unit=key,
                tensors=len(members),
                kl_divergence=q["kl_divergence"],
                perplexity_delta=q["perplexity_delta"],
                top1_agreement=q["top1_agreement"],
                sqnr_db=10 * math.log10(sig / err) if err > 0 and sig > 0 else None,
                kl_interval=tot.kl_ci().as_list(),
            )
        )
        editor.restore(members)
    ranking.sort(key=lambda r: r.kl_divergence, reverse=True)
    return ranking, totals


def run(params: TensorSensitivityParams, ctx: Context) -> TensorSensitivityResult:
    import time

    from labs.lm import fakequant, session
    from labs.lm.evaluate import compare

    t0 = time.perf_counter()
    ev = session.open_evaluation(params, ctx, 0.0, 0.1)
    names = ev.spec.linear_names(params.tensors)
    groups = units(names, params.unit)
    options = spec.format_options(params.format, params.granularity)
    fmt_label = spec.label(params.format, params.granularity)
    editor = fakequant.WeightEditor(ev.model)
    # Every tensor quantized once, up front; a unit's test swaps its tensors in and out.
    quantized = {
        n: fakequant.quantize_weight(editor.original(n), params.format, options) for n in names
    }
    n_evals = len(groups) + len(params.uniform) + 3
    done = 0

    def progress() -> tuple[float, float]:
        nonlocal done
        done += 1
        return 0.1 + 0.88 * (done - 1) / n_evals, 0.88 / n_evals

    ranking, totals = _rank(ev, ctx, params, editor, quantized, groups, progress)
    _present_ranking(
        ctx, ranking, f"sensitivity: one {params.unit} at a time in {fmt_label}", fmt_label
    )
    top = ranking[0].unit
    ties = [r.unit for r in ranking if compare(totals[r.unit], totals[top], "kl").inside_noise]

    def point(label: str, plan: Mapping[str, tuple[str, Mapping[str, Any]]]) -> Point:
        nbytes = numel = 0
        for n, (f, opts) in plan.items():
            dq, b = (
                quantized[n]
                if (f, opts) == (params.format, options)
                else fakequant.quantize_weight(editor.original(n), f, dict(opts))
            )
            editor.set(n, dq)
            nbytes += b
            numel += dq.numel()
        start, span = progress()
        tot = session.score(ev, ctx, start, span, label)
        editor.restore()
        return Point(
            label=label,
            bits_per_weight=8 * nbytes / numel,
            weight_bytes=nbytes,
            kl_divergence=tot.kl_divergence(),
            perplexity=tot.perplexity(),
        )

    chosen = {r.unit for r in ranking[: params.top_k]}
    recipe = {key: params.high_format if key in chosen else fmt_label for key in groups}
    plan = {
        n: ((params.high_format, {}) if key in chosen else (params.format, options))
        for key, members in groups.items()
        for n in members
    }
    mixed = point(f"mixed: top {params.top_k} in {params.high_format}", plan)
    base = point(f"all {fmt_label}", {n: (params.format, options) for n in names})
    formats = list(dict.fromkeys([params.high_format, *params.uniform]))
    uniform = [point(f"all {f}", {n: (f, {}) for n in names}) for f in formats]
    _present_points(ctx, uniform, mixed, base)
    ctx.progress(1.0, "done")
    result = TensorSensitivityResult(
        model=params.model,
        format=fmt_label,
        unit=params.unit,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
        baseline_perplexity=ev.base.perplexity(),
        ranking=ranking,
        most_sensitive_kind=top if params.unit == "kind" else None,
        most_sensitive_ties=ties,
        mixed=mixed,
        base=base,
        high_format=params.high_format,
        recipe=recipe,
        uniform=uniform,
        mixed_worth_its_bits=worth_its_bits(mixed, base, uniform[0]),
        finding="",
        seconds=time.perf_counter() - t0,
    )
    result.finding = model_labs.tensor_sensitivity_finding(result.model_dump())
    return result


LAB = Lab(
    id="tensor-sensitivity",
    title="Which tensors need more bits?",
    summary="The paired test: quantize one tensor (or tensor kind, or layer) at a time on the "
    "same held-out tokens, rank them by the KL divergence they cause, and compare the mixed "
    "recipe the ranking suggests with uniform formats on a size-vs-KL plot.",
    needs_gpu=NeedsGPU.preferred,
    params=TensorSensitivityParams,
    run=run,
    time_limit_s=600.0,
    memory_limit_mb=4096,
    headline=model_labs.tensor_sensitivity,
    choice_outputs=(
        ChoiceOutput(
            key="most_sensitive_kind",
            label="Most sensitive kind of weight",
            options=spec.KINDS,
            ties_key="most_sensitive_ties",
        ),
    ),
    concept=model_labs.tensor_sensitivity_concept,
)

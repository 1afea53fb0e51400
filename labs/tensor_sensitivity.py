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

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.lm import spec
from labs.lm.session import field_error
from labs.model_quality import WeightParams

Unit = Literal["tensor", "kind", "layer"]
MAX_UNIFORM = 6
DEFAULT_UNIFORM: tuple[spec.FormatKey, ...] = ("q8_0", "q4_0")


class TensorSensitivityParams(WeightParams):
    format: spec.FormatKey = Field(default="int4", description="The format each unit is tested in")
    granularity: spec.Granularity = Field(
        default="channel",
        description="For int8/int4/fp8: tensor, channel or a block size; default: the format's own",
    )
    eval_tokens: int = Field(
        default=1024, ge=16, le=131_072, description="Held-out tokens evaluated"
    )
    unit: Unit = Field(
        default="kind",
        description="What is quantized at a time: one tensor, one kind (q_proj … down_proj) "
        "in every layer, or one whole layer",
    )
    high_format: spec.FormatKey = Field(
        default="q8_0", description="Format of the top_k most sensitive units in the mixed recipe"
    )
    top_k: int = Field(default=2, ge=0, le=64, description="Units kept in high_format")
    uniform: list[spec.FormatKey] = Field(
        default_factory=lambda: list(DEFAULT_UNIFORM),
        max_length=MAX_UNIFORM,
        description="Uniform formats drawn beside the mixed recipe on the size-vs-KL plot",
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
    mixed: Point
    recipe: dict[str, str] = Field(description="Unit -> format in the mixed recipe")
    uniform: list[Point]
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


def _present_ranking(ctx: Context, ranking: list[Ranked], title: str) -> None:
    ctx.table(
        title,
        ["unit", "KL nats", "Δ perplexity", "top-1", "SQNR dB"],
        [
            [r.unit, r.kl_divergence, r.perplexity_delta, r.top1_agreement, r.sqnr_db]
            for r in ranking
        ],
    )


def _present_points(ctx: Context, uniform: list[Point], mixed: Point) -> None:
    """The size-vs-KL plot of the uniform formats and the mixed recipe, and its point."""
    from labs.plots import line_chart

    pts = sorted(uniform, key=lambda p: p.bits_per_weight)
    ctx.plot(
        "size vs KL divergence",
        line_chart(
            {
                "uniform formats": (
                    [p.bits_per_weight for p in pts],
                    [p.kl_divergence for p in pts],
                ),
                "mixed recipe": ([mixed.bits_per_weight], [mixed.kl_divergence]),
            },
            title="bits per weight vs KL (lower left is better)",
            x_label="bits per weight (decoder linears)",
            y_label="KL divergence, nats/token",
        ),
        {"points": [p.model_dump() for p in [*uniform, mixed]]},
    )
    ctx.metric("mixed_kl_divergence", mixed.kl_divergence, "nats", "mixed recipe: KL")
    ctx.metric("mixed_bits_per_weight", mixed.bits_per_weight, "bits", "mixed recipe: bits/weight")


def run(params: TensorSensitivityParams, ctx: Context) -> TensorSensitivityResult:
    import math
    import time

    from labs.lm import fakequant, session

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
    n_evals = len(groups) + len(params.uniform) + 1
    done = 0

    def frac() -> float:
        return 0.1 + 0.88 * done / n_evals

    ranking = []
    for key, members in groups.items():
        for n in members:
            editor.set(n, quantized[n][0])
        tot = session.score(ev, ctx, frac(), 0.88 / n_evals, f"{key} in {fmt_label}")
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
            )
        )
        editor.restore(members)
        done += 1
    ranking.sort(key=lambda r: r.kl_divergence, reverse=True)
    _present_ranking(ctx, ranking, f"sensitivity: one {params.unit} at a time in {fmt_label}")

    def point(label: str, plan: Mapping[str, tuple[str, Mapping[str, Any]]]) -> Point:
        nonlocal done
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
        tot = session.score(ev, ctx, frac(), 0.88 / n_evals, label)
        editor.restore()
        done += 1
        return Point(
            label=label,
            bits_per_weight=8 * nbytes / numel,
            weight_bytes=nbytes,
            kl_divergence=tot.kl_divergence(),
            perplexity=tot.perplexity(),
        )

    top = {r.unit for r in ranking[: params.top_k]}
    recipe = {key: params.high_format if key in top else fmt_label for key in groups}
    plan = {
        n: ((params.high_format, {}) if key in top else (params.format, options))
        for key, members in groups.items()
        for n in members
    }
    mixed = point(f"mixed: top {params.top_k} in {params.high_format}, rest {fmt_label}", plan)
    uniform = [point(f, {n: (f, {}) for n in names}) for f in params.uniform]
    _present_points(ctx, uniform, mixed)
    ctx.progress(1.0, "done")
    return TensorSensitivityResult(
        model=params.model,
        format=fmt_label,
        unit=params.unit,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
        baseline_perplexity=ev.base.perplexity(),
        ranking=ranking,
        mixed=mixed,
        recipe=recipe,
        uniform=uniform,
        seconds=time.perf_counter() - t0,
    )


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
)

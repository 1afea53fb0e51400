"""tensor-sensitivity's computation: what ``run`` does, emitting its progress."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.base import Context
from labs.lm import spec
from labs.tensor_sensitivity.model import (
    Point,
    Ranked,
    TensorSensitivityParams,
    TensorSensitivityResult,
)
from labs.tensor_sensitivity.present import finding


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


def worth_its_bits(mixed: Point, base: Point, high: Point) -> bool:
    """The mix beats spending the same bits evenly: its KL lies below the straight line
    from its base to uniform ``high`` at its bits per weight."""
    span = high.bits_per_weight - base.bits_per_weight
    if span <= 0:
        return mixed.kl_divergence < min(base.kl_divergence, high.kl_divergence)
    t = (mixed.bits_per_weight - base.bits_per_weight) / span
    return mixed.kl_divergence < base.kl_divergence + t * (high.kl_divergence - base.kl_divergence)


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
    result.finding = finding(result.model_dump())
    return result

"""Lab ``quant-algorithms``: round-to-nearest vs GPTQ vs AWQ on a real model.

The same format (default int4, groups of 128) reached three ways: plain
round-to-nearest (RTN); GPTQ, which rounds column by column and pushes each
error onto the columns still to come using calibration activations; AWQ, which
scales salient input channels up before rounding. GPTQ and AWQ calibrate on
``calibration_tokens`` of the training split (``calibration.txt``); every
method is judged on both the calibration text and the held-out text, because a
method that only looks good on its calibration data has overfitted it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, get_args

from pydantic import BaseModel, Field, model_validator

from labs.base import ChoiceOutput, Context, Lab, LabResult, NeedsGPU
from labs.catalog.formats import QuantFormatKey
from labs.lm import spec
from labs.lm.session import field_error
from labs.model_quality import WeightParams
from labs.presenters import quant_algorithms as verdict

if TYPE_CHECKING:
    import torch

    from labs.lm.fakequant import WeightEditor
    from labs.lm.session import Evaluation

Method = Literal["rtn", "gptq", "awq"]
# AWQ's scale groups: linears that read the same input share one scale, which a real
# checkpoint folds into the op that produced that input.
AWQ_GROUPS = (
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),  # input_layernorm
    ("self_attn.o_proj",),  # v_proj (only when widths match, i.e. no GQA)
    ("mlp.gate_proj", "mlp.up_proj"),  # post_attention_layernorm
    ("mlp.down_proj",),  # up_proj
)


class QuantAlgorithmsParams(WeightParams):
    format: QuantFormatKey = Field(default="int4", description="The format every method produces")
    eval_tokens: int = Field(
        default=1024,
        ge=16,
        le=131_072,
        title="Tokens evaluated",
        description="Held-out tokens evaluated (the first ones of the held-out text)",
    )
    methods: list[Method] = Field(
        default_factory=lambda: list(get_args(Method)),
        min_length=1,
        max_length=3,
        description="Which of rtn (round-to-nearest), gptq and awq to run",
    )
    calibration_tokens: int = Field(
        default=1024,
        ge=16,
        le=65_536,
        title="Calibration tokens",
        description="Tokens of calibration text (from the training split) GPTQ and AWQ see",
    )
    damp: float = Field(
        default=0.01,
        gt=0,
        le=1,
        title="GPTQ damping",
        description="Added to the diagonal of GPTQ's Hessian, as a share of its mean",
    )
    act_order: bool = Field(
        default=False,
        title="GPTQ activation order",
        description="GPTQ visits columns with the largest input activations first",
    )

    @model_validator(mode="after")
    def _check_calibration(self) -> QuantAlgorithmsParams:
        if len(set(self.methods)) != len(self.methods):
            raise field_error(self, "methods", "each method at most once")
        s = self.model_spec()
        if self.calibration_tokens < self.context:
            raise field_error(
                self,
                "calibration_tokens",
                f"calibration_tokens ({self.calibration_tokens}) must hold one window of "
                f"context ({self.context})",
            )
        if s.calibration_tokens is not None and self.calibration_tokens > s.calibration_tokens:
            raise field_error(
                self,
                "calibration_tokens",
                f"calibration_tokens ({self.calibration_tokens}) is beyond the "
                f"{s.calibration_tokens} tokens of calibration.txt",
            )
        return self


class Quality(BaseModel):
    kl_divergence: float
    kl_divergence_interval: list[float] = Field(default_factory=list, description="95 %")
    perplexity: float
    perplexity_interval: list[float] = Field(default_factory=list)
    top1_agreement: float
    top1_agreement_interval: list[float] = Field(default_factory=list)

    @classmethod
    def of(cls, tot: Any) -> Quality:
        """The figures of one evaluation (``labs.lm.evaluate.Totals``) with intervals."""
        return cls(
            kl_divergence=tot.kl_divergence(),
            kl_divergence_interval=tot.kl_ci().as_list(),
            perplexity=tot.perplexity(),
            perplexity_interval=list(tot.perplexity_interval()),
            top1_agreement=tot.top1_agreement(),
            top1_agreement_interval=tot.top1_ci().as_list(),
        )


class MethodResult(BaseModel):
    calibration: Quality
    heldout: Quality
    vs_rtn: dict[str, float | int | bool] | None = Field(
        default=None, description="Paired difference of held-out KL per window, method − RTN"
    )
    weight_bytes: int
    bits_per_weight: float
    seconds: float = Field(description="Time to quantize, calibration included")
    detail: dict[str, float] = Field(default_factory=dict)


class QuantAlgorithmsResult(LabResult):
    model: str
    format: str
    device: str
    eval_tokens: int
    calibration_tokens: int
    baseline_perplexity: float
    baseline_calibration_perplexity: float
    methods: dict[str, MethodResult]
    best_method: str = Field(description="The method with the lowest held-out KL")
    best_method_ties: list[str] = Field(
        description="Methods whose held-out KL a paired comparison cannot tell from the best's"
    )
    outliers: dict[str, Any] | None = Field(
        description="The calibration activations' most unequal input channel (AWQ's statistic)"
    )
    finding: str
    seconds: float


def _block(ev: Evaluation, prefix: str, group: tuple[str, ...]) -> Any:
    """The module output AWQ's search preserves for ``group``: for gate/up the whole MLP
    (SwiGLU, then the unquantized down_proj), as the reference does; else each output."""
    if group != AWQ_GROUPS[2]:
        return None
    import torch.nn.functional as F

    mlp = ev.model.get_submodule(prefix + "mlp")
    down = mlp.down_proj.weight.detach().float()

    def block(x: torch.Tensor, ws: list[torch.Tensor]) -> torch.Tensor:
        return (F.silu(x @ ws[0].T) * (x @ ws[1].T)) @ down.T

    return block


def _shared_input_sets(
    inputs: dict[str, torch.Tensor],
    originals: dict[str, torch.Tensor],
    key: str,
    options: dict[str, Any],
) -> list[list[str]]:
    """The linears of a layer grouped by the input tensor they share (q/k/v, gate/up),
    when stacking their rows changes no scale (the format has no per-tensor scale);
    otherwise each linear alone."""
    from labs.quant import quantize

    sample = next(iter(originals.values()))
    if quantize(sample[:1].float(), key, **options).tensor_scale is not None:
        return [[n] for n in inputs]
    sets: dict[int, list[str]] = {}
    for n in inputs:
        sets.setdefault(id(inputs[n]), []).append(n)
    return list(sets.values())


def _quantize(
    method: str,
    ev: Evaluation,
    cal_w: torch.Tensor,
    names: list[str],
    params: QuantAlgorithmsParams,
    editor: WeightEditor,
    ctx: Context,
    frac: tuple[float, float],
) -> tuple[int, dict[str, float]]:
    """Quantize ``names`` in place with ``method``; returns stored bytes and details."""
    import torch

    from labs.lm import calibrate, fakequant
    from labs.quant import quantize
    from labs.quant.awq import awq
    from labs.quant.gptq import gptq, hessian
    from labs.quant.parallel import map_chunks

    options = spec.format_options(params.format, params.granularity)
    nbytes = 0
    detail: dict[str, float] = {}
    if method == "rtn":
        return sum(
            r.nbytes for r in fakequant.quantize_model(editor, names, params.format, options)
        ), detail

    def layer(i: int, inputs: dict[str, torch.Tensor]) -> None:
        nonlocal nbytes
        if method == "gptq":  # a layer's linears are independent: spread over the cores
            originals = {n: editor.original(n) for n in inputs}
            sets = _shared_input_sets(inputs, originals, params.format, options)

            def run_set(members: list[str]) -> list[torch.Tensor]:
                # GPTQ treats rows independently given H: linears fed the same input share
                # one H and, stacked, one pass over the columns.
                gr = gptq(
                    torch.cat([originals[n] for n in members]),
                    hessian(inputs[members[0]]),
                    params.format,
                    options,
                    damp=params.damp,
                    act_order=params.act_order,
                )
                return list(gr.weight.split([originals[n].shape[0] for n in members]))

            for members, weights in zip(sets, map_chunks(run_set, sets), strict=True):
                for n, w in zip(members, weights, strict=True):
                    editor.set(n, w)
                    nbytes += int(quantize(w, params.format, **options).nbytes)
            return
        prefix = f"model.layers.{i}."
        for group in AWQ_GROUPS:
            members = [prefix + g for g in group if prefix + g in inputs]
            if not members:
                continue
            ws = [editor.original(n) for n in members]
            foldable = (
                group != AWQ_GROUPS[1]
                or editor.weight(prefix + "self_attn.v_proj").shape[0] == ws[0].shape[1]
            )
            ar = awq(  # GQA: 1/s cannot be folded into v_proj, so no scale (n_grid=1) there
                ws,
                inputs[members[0]],
                params.format,
                options,
                block=_block(ev, prefix, group),
                n_grid=20 if foldable else 1,
                clip=[not n.endswith(("q_proj", "k_proj")) for n in members],  # as the reference
            )
            for n, dq, b in zip(members, ar.weights, ar.nbytes, strict=True):
                editor.set(n, dq)
                nbytes += b
            detail[f"alpha.{i}.{group[0].split('.')[-1]}"] = ar.alpha

    def on_layer(k: int, n: int) -> None:
        ctx.progress(frac[0] + frac[1] * k / n, f"{method}: layer {k}/{n}")

    calibrate.sequential(ev.model, names, cal_w, ev.batch_size, ev.device, layer, on_layer)
    return nbytes, detail


def _outliers(sums: dict[Any, Any], tokens: int) -> dict[str, Any]:
    """The most unequal input channel over every layer and AWQ input point."""
    from labs.lm.calibrate import summarize_outliers

    stats = summarize_outliers(sums, tokens)
    worst = max(stats, key=lambda o: o.max_over_median)
    return {**worst.as_dict(), "top_share_max": max(o.top_share for o in stats)}


def _present(ctx: Context, fmt_label: str, results: dict[str, MethodResult], best: str) -> None:
    from labs.viz.model_charts import interval_bars

    methods = list(results)
    ctx.table(
        f"{fmt_label}: calibration vs held-out",
        ["method", "KL calibration", "KL held-out", "ppl calibration", "ppl held-out", "seconds"],
        [
            [
                m,
                r.calibration.kl_divergence,
                r.heldout.kl_divergence,
                r.calibration.perplexity,
                r.heldout.perplexity,
                r.seconds,
            ]
            for m, r in results.items()
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
        },
    )


def run(params: QuantAlgorithmsParams, ctx: Context) -> QuantAlgorithmsResult:
    import time

    from labs.lm import calibrate, fakequant, models, session
    from labs.lm.evaluate import compare, evaluate, windows

    t0 = time.perf_counter()
    ev = session.open_evaluation(params, ctx, 0.0, 0.1)
    cal_ids = session.token_ids(ev.loaded, models.CALIBRATION_FILE)
    if params.calibration_tokens > len(cal_ids):
        raise ValueError(
            f"calibration_tokens ({params.calibration_tokens}) is beyond the {len(cal_ids)} "
            "tokens of the calibration text"
        )
    cal_w = windows(cal_ids[: params.calibration_tokens], params.context)
    # The calibration text's reference pass also collects AWQ's activation statistic.
    with calibrate.outlier_sums(ev.model) as sums:
        cal_base, cal_ref = evaluate(
            ev.model, cal_w, batch_size=ev.batch_size, device=ev.device, keep_reference=True
        )
    outliers = _outliers(sums, cal_w.numel()) if "awq" in params.methods else None
    names = ev.spec.linear_names(params.tensors)
    numel = sum(ev.model.get_submodule(n).weight.numel() for n in names)
    fmt_label = spec.label(params.format, params.granularity)
    editor = fakequant.WeightEditor(ev.model)
    results: dict[str, MethodResult] = {}
    held_totals: dict[str, Any] = {}
    share = 0.88 / len(params.methods)
    for k, m in enumerate(params.methods):
        start = 0.12 + share * k
        tq = time.perf_counter()
        nbytes, detail = _quantize(m, ev, cal_w, names, params, editor, ctx, (start, share * 0.6))
        seconds = time.perf_counter() - tq
        ctx.progress(start + share * 0.6, f"{m}: evaluating")
        held = held_totals[m] = session.score(ev)
        cal, _ = evaluate(
            ev.model, cal_w, reference=cal_ref, batch_size=ev.batch_size, device=ev.device
        )
        editor.restore()
        results[m] = MethodResult(
            calibration=Quality.of(cal),
            heldout=Quality.of(held),
            weight_bytes=nbytes,
            bits_per_weight=8 * nbytes / numel,
            seconds=seconds,
            detail=detail,
        )
        ctx.metric(f"{m}_kl", held.kl_divergence(), "nats", f"{m}: held-out KL")
    if "rtn" in held_totals:
        for name, r in results.items():
            if name != "rtn":
                r.vs_rtn = compare(held_totals[name], held_totals["rtn"], "kl").as_dict()
    best = min(results, key=lambda m: results[m].heldout.kl_divergence)
    ties = [m for m in results if compare(held_totals[m], held_totals[best], "kl").inside_noise]
    _present(ctx, fmt_label, results, best)
    ctx.progress(1.0, "done")
    result = QuantAlgorithmsResult(
        model=params.model,
        format=fmt_label,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
        calibration_tokens=params.calibration_tokens,
        baseline_perplexity=ev.base.perplexity(),
        baseline_calibration_perplexity=cal_base.perplexity(),
        methods=results,
        best_method=best,
        best_method_ties=ties,
        outliers=outliers,
        finding="",
        seconds=time.perf_counter() - t0,
    )
    result.finding = verdict.quant_algorithms_finding(result.model_dump())
    return result


LAB = Lab(
    id="quant-algorithms",
    title="Round-to-nearest, GPTQ and AWQ",
    summary="Reach the same 4-bit format three ways — round-to-nearest, GPTQ's error feedback "
    "and AWQ's activation-aware scaling — calibrate on training text and judge on held-out "
    "text, and see which error each method removes.",
    needs_gpu=NeedsGPU.preferred,
    params=QuantAlgorithmsParams,
    run=run,
    time_limit_s=900.0,
    memory_limit_mb=4096,
    headline=verdict.quant_algorithms,
    choice_outputs=(
        ChoiceOutput(
            key="best_method",
            label="Method with the lowest held-out KL",
            options=get_args(Method),
            ties_key="best_method_ties",
        ),
    ),
    concept=verdict.quant_algorithms_concept,
)

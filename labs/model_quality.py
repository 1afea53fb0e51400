"""Lab ``model-quality``: what a format does to a real model, not only to a tensor.

Quantize the selected decoder linear weights of the shipped ``lowbit-tiny`` (or
a checkpoint under ``LOWBIT_MODELS_DIR``) with any ``labs.quant`` format, keep
named tensors in full precision, and evaluate on held-out text exactly as
DESIGN.md's evaluation contract says: perplexity of both models, KL divergence
from the unquantized model, top-1 agreement, the stored size, a per-tensor SQNR
table and both models' greedy continuation of a fixed prompt.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.lm import spec
from labs.lm.session import ModelParams, field_error
from labs.presenters import model_labs

Tensors = Literal["all", "attention", "mlp"]
MAX_KEEP = 64
SAMPLE_TOKENS = 24


class WeightParams(ModelParams):
    """Which weights are quantized, and to what (shared with tensor-sensitivity)."""

    format: spec.FormatKey = Field(default="q4_0", description="The weights' format")
    granularity: spec.Granularity = Field(
        default="default",
        description="For int8/int4/fp8: tensor, channel or a block size (e.g. 128); "
        "default keeps the format's own",
    )
    tensors: Tensors = Field(
        default="all",
        title="Which weights",
        description="Which decoder linear layers: all, attention or mlp",
    )

    @model_validator(mode="after")
    def _check_format(self) -> WeightParams:
        where = "format" if self.granularity == "default" else "granularity"
        if isinstance(self.granularity, int) and self.granularity < 1:
            raise field_error(self, where, "granularity as a block size must be at least 1")
        try:
            spec.format_options(self.format, self.granularity)  # raises for a bad pair
        except ValueError as e:
            raise field_error(self, where, str(e)) from None
        s = self.model_spec()
        problem = spec.block_problem(
            s,
            s.linear_names(self.tensors),
            self.format,
            spec.block_of(self.format, self.granularity),
        )
        if problem:
            raise field_error(self, where, problem)
        return self


class ModelQualityParams(WeightParams):
    keep: list[str] = Field(
        default_factory=list,
        max_length=MAX_KEEP,
        title="Kept in full precision",
        description="Name patterns left in full precision, e.g. down_proj or layers.0.*",
    )

    @model_validator(mode="after")
    def _check_keep(self) -> ModelQualityParams:
        try:
            spec.select(self.model_spec().linear_names(self.tensors), self.keep)
        except ValueError as e:
            raise field_error(self, "keep", str(e)) from None
        return self


class TensorRow(BaseModel):
    name: str
    shape: list[int]
    quantized: bool
    bits: float = Field(description="Stored bits per weight, scales included")
    sqnr_db: float | None = Field(description="10·log10(Σw²/Σerror²); None when kept exact")


class Sample(BaseModel):
    prompt: str
    baseline: str
    quantized: str


class ModelQualityResult(LabResult):
    model: str
    format: str
    device: str
    eval_tokens: int
    predicted_tokens: int
    windows: int
    baseline_perplexity: float
    baseline_perplexity_interval: list[float] = Field(description="95 % interval over windows")
    perplexity: float
    perplexity_interval: list[float]
    perplexity_delta: float
    perplexity_vs_baseline: dict[str, float | int | bool] = Field(
        description="Paired difference of mean NLL per window, quantized − unquantized"
    )
    kl_divergence: float = Field(description="Mean KL(p_ref ‖ p_quantized), nats per token")
    kl_divergence_interval: list[float] = Field(description="95 % interval over windows")
    window_kl: list[float] = Field(
        default_factory=list, description="Mean KL of each window: what pairs two runs"
    )
    top1_agreement: float = Field(description="Share of positions whose argmax agrees")
    top1_agreement_interval: list[float]
    weight_bytes: int = Field(description="Decoder linear weights as stored, scales included")
    baseline_weight_bytes: int = Field(description="The same weights in the model's dtype")
    bits_per_weight: float
    baseline_bits_per_weight: float
    quantized_tensors: int
    kept_tensors: list[str]
    tensor_table: list[TensorRow]
    sample: Sample
    finding: str = Field(description="What the run shows, in two or three sentences")
    seconds: float


def run(params: ModelQualityParams, ctx: Context) -> ModelQualityResult:
    import time

    from labs.lm import card, fakequant, session
    from labs.lm.evaluate import compare

    t0 = time.perf_counter()
    ev = session.open_evaluation(params, ctx, 0.0, 0.35)
    names = ev.spec.linear_names(params.tensors)
    quantized, kept = spec.select(names, params.keep)
    options = spec.format_options(params.format, params.granularity)
    fmt_label = spec.label(params.format, params.granularity)
    base_sample = card.greedy_sample(ev.model, ev.loaded.tokenizer, new_tokens=SAMPLE_TOKENS)
    editor = fakequant.WeightEditor(ev.model)

    def on_tensor(i: int, n: int, name: str) -> None:
        ctx.progress(0.35 + 0.15 * i / n, f"quantizing {name}")

    reports = fakequant.quantize_model(editor, quantized, params.format, options, on_tensor)
    reports += [fakequant.kept_report(editor, n) for n in kept]
    tot = session.score(ev, ctx, 0.5, 0.45, f"evaluating {fmt_label}")
    q_sample = card.greedy_sample(ev.model, ev.loaded.tokenizer, new_tokens=SAMPLE_TOKENS)
    editor.restore()

    by_name = {r.name: r for r in reports}
    rows = [
        TensorRow(
            name=n,
            shape=by_name[n].shape,
            quantized=n in quantized,
            bits=by_name[n].bits,
            sqnr_db=by_name[n].sqnr_db,
        )
        for n in names
    ]
    numel = sum(r.numel for r in reports)
    weight_bytes = sum(r.nbytes for r in reports)
    baseline_bytes = sum(r.baseline_nbytes for r in reports)
    q = session.quality(tot, ev.base)
    ctx.metric("baseline_perplexity", ev.base.perplexity(), "", "baseline perplexity")
    ctx.metric("perplexity", q["perplexity"], "", f"perplexity, {fmt_label}")
    ctx.metric("kl_divergence", q["kl_divergence"], "nats", "KL vs unquantized")
    ctx.metric("top1_agreement", 100 * q["top1_agreement"], "%", "top-1 agreement")
    ctx.metric("bits_per_weight", 8 * weight_bytes / numel, "bits", "bits per weight")
    ctx.table(
        f"decoder weights in {fmt_label}",
        ["tensor", "shape", "bits", "SQNR dB"],
        [[r.name, "×".join(map(str, r.shape)), r.bits, r.sqnr_db] for r in rows],
    )
    _plot_sqnr(ctx, rows, fmt_label)
    prompt = card.SAMPLE_PROMPT
    ctx.table(
        "greedy continuation",
        ["model", "text"],
        [["baseline", prompt + base_sample], [fmt_label, prompt + q_sample]],
    )
    ctx.progress(1.0, "done")
    result = ModelQualityResult(
        model=params.model,
        format=fmt_label,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
        predicted_tokens=tot.count,
        windows=tot.windows,
        baseline_perplexity=ev.base.perplexity(),
        baseline_perplexity_interval=list(ev.base.perplexity_interval()),
        perplexity=q["perplexity"],
        perplexity_interval=list(tot.perplexity_interval()),
        perplexity_delta=q["perplexity_delta"],
        perplexity_vs_baseline=compare(tot, ev.base, "nll").as_dict(),
        kl_divergence=q["kl_divergence"],
        kl_divergence_interval=tot.kl_ci().as_list(),
        window_kl=tot.window_kl if tot.windows <= spec.MAX_PAIRED_WINDOWS else [],
        top1_agreement=q["top1_agreement"],
        top1_agreement_interval=tot.top1_ci().as_list(),
        weight_bytes=weight_bytes,
        baseline_weight_bytes=baseline_bytes,
        bits_per_weight=8 * weight_bytes / numel,
        baseline_bits_per_weight=8 * baseline_bytes / numel,
        quantized_tensors=len(quantized),
        kept_tensors=kept,
        tensor_table=rows,
        sample=Sample(prompt=prompt, baseline=base_sample, quantized=q_sample),
        finding="",
        seconds=time.perf_counter() - t0,
    )
    result.finding = model_labs.model_quality_finding(result.model_dump())
    return result


def _plot_sqnr(ctx: Context, rows: list[TensorRow], fmt_label: str) -> None:
    """SQNR by kind of weight, whiskers from its worst to its best layer: 28 bars of
    dotted names did not read, and a layer x kind colour grid painted 0.1 dB of noise as
    contrast."""
    from labs.viz.model_charts import interval_bars

    shown = [r for r in rows if r.quantized and r.sqnr_db is not None]
    if not shown:
        return
    kinds = [k for k in spec.KINDS if any(r.name.endswith("." + k) for r in shown)]
    by_kind = {
        k: [float(r.sqnr_db or 0.0) for r in shown if r.name.endswith("." + k)] for k in kinds
    }
    ctx.plot(
        "SQNR of each quantized weight",
        interval_bars(
            kinds,
            [sum(v) / len(v) for v in by_kind.values()],
            [[min(v), max(v)] for v in by_kind.values()],
            title=f"{fmt_label}: SQNR by kind of weight, mean over layers (higher is better)",
            value_label="SQNR, dB",
            whiskers="lowest and highest layer",
        ),
        {
            "tensors": [r.name for r in shown],
            "sqnr_db": [r.sqnr_db for r in shown],
            # The bars themselves, so a compare page can redraw two runs on one axis.
            "kind": "bars",
            "title": f"{fmt_label}: SQNR by kind of weight",
            "labels": kinds,
            "values": [sum(v) / len(v) for v in by_kind.values()],
            "low": [min(v) for v in by_kind.values()],
            "high": [max(v) for v in by_kind.values()],
            "x_label": "SQNR, dB (whiskers: lowest and highest layer)",
        },
    )


LAB = Lab(
    id="model-quality",
    title="What a format does to a model",
    summary="Quantize the linear weights of a real (small) Llama model to any format, keep "
    "chosen tensors in full precision, and measure held-out perplexity, KL divergence from "
    "the unquantized model, top-1 agreement and size; see both models continue a prompt.",
    needs_gpu=NeedsGPU.preferred,
    params=ModelQualityParams,
    run=run,
    time_limit_s=300.0,
    memory_limit_mb=4096,
    numeric_outputs=(
        ("kl_divergence", "nats"),
        ("top1_agreement", "fraction"),
        ("perplexity", "perplexity"),
    ),
    headline=model_labs.model_quality,
    concept=model_labs.model_quality_concept,
)

"""Lab ``model-quality``: what a format does to a real model, not only to a tensor.

Quantize the selected decoder linear weights of the shipped ``lowbit-tiny`` (or
a checkpoint under ``LOWBIT_MODELS_DIR``) with any ``labs.quant`` format, keep
named tensors in full precision, and evaluate on held-out text exactly as
DESIGN.md's evaluation contract says: perplexity of both models, KL divergence
from the unquantized model, top-1 agreement, the stored size, a per-tensor SQNR
table and both models' greedy continuation of a fixed prompt.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field, model_validator

from labs.base import Concept, Context, Lab, LabResult, NeedsGPU
from labs.lm import spec
from labs.lm.interval_text import interval_tile, perplexity_change, pm
from labs.lm.session import WeightParams, field_error
from labs.viz.tiles import Tile, readable, readable_bytes, tile

MAX_KEEP = 64
SAMPLE_TOKENS = 24


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
    prompt = card.SAMPLE_PROMPT
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
    result.finding = finding(result.model_dump())
    return result


def present(r: ModelQualityResult, params: ModelQualityParams, ctx: Context) -> None:
    """The metrics, the table of weights, SQNR by kind of weight and both continuations."""
    ctx.metric("baseline_perplexity", r.baseline_perplexity, "", "baseline perplexity")
    ctx.metric("perplexity", r.perplexity, "", f"perplexity, {r.format}")
    ctx.metric("kl_divergence", r.kl_divergence, "nats", "KL vs unquantized")
    ctx.metric("top1_agreement", 100 * r.top1_agreement, "%", "top-1 agreement")
    ctx.metric("bits_per_weight", r.bits_per_weight, "bits", "bits per weight")
    ctx.table(
        f"decoder weights in {r.format}",
        ["tensor", "shape", "bits", "SQNR dB"],
        [[t.name, "×".join(map(str, t.shape)), t.bits, t.sqnr_db] for t in r.tensor_table],
    )
    _plot_sqnr(ctx, r.tensor_table, r.format)
    sample = r.sample
    ctx.table(
        "greedy continuation",
        ["model", "text"],
        [
            ["baseline", sample.prompt + sample.baseline],
            [r.format, sample.prompt + sample.quantized],
        ],
    )


def _plot_sqnr(ctx: Context, rows: list[TensorRow], fmt_label: str) -> None:
    """SQNR by kind of weight, whiskers from its worst to its best layer: 28 bars of
    dotted names did not read, and a layer x kind colour grid painted 0.1 dB of noise as
    contrast."""
    from labs.viz.model_charts import bars_data, interval_bars

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
            **bars_data(
                f"{fmt_label}: SQNR by kind of weight",
                kinds,
                [sum(v) / len(v) for v in by_kind.values()],
                [[min(v), max(v)] for v in by_kind.values()],
                "SQNR, dB (whiskers: lowest and highest layer)",
            ),
        },
        id="sqnr",
    )


# --- the verdict: tiles, finding and review question, from the stored result ---

Stored = Mapping[str, Any]  # a stored result (JSON)
# bits per weight of the comparison format in the review question
Q8_0_BITS = 8.5
Q4_0_BITS = 4.5


def headline(r: Stored) -> list[Tile]:
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


def finding(r: Stored) -> str:
    smaller = r["baseline_weight_bytes"] / max(1, r["weight_bytes"])
    changed = 100 * (1 - r["top1_agreement"])
    return (
        f"{r['format']} stores the weights in {readable(r['bits_per_weight'])} bits each, "
        f"{readable(smaller)}× smaller than the unquantized model's "
        f"{readable(r['baseline_bits_per_weight'])} bits. "
        f"It moves the next-token distribution by {pm(r['kl_divergence'], r.get('kl_divergence_interval'), 'nats')} "
        f"of KL and changes the top token at {readable(changed, 2)} % of positions. "
        f"Over these {r['windows']} windows {perplexity_change(r)}"
        + (
            ": perplexity cannot tell the two models apart here, while KL and top-1 "
            "measure the change position by position."
            if (r.get("perplexity_vs_baseline") or {}).get("inside_noise")
            else "."
        )
    )


def concept(r: Stored, metric: str) -> Concept | None:
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


LAB = Lab(
    id="model-quality",
    title="What a format does to a model",
    summary="Quantize the linear weights of a real (small) Llama model to any format, keep "
    "chosen tensors in full precision, and measure held-out perplexity, KL divergence from "
    "the unquantized model, top-1 agreement and size; see both models continue a prompt.",
    needs_gpu=NeedsGPU.preferred,
    params=ModelQualityParams,
    run=run,
    present=present,
    time_limit_s=300.0,
    memory_limit_mb=4096,
    wide_ops=True,
    numeric_outputs=(
        ("kl_divergence", "nats"),
        ("top1_agreement", "fraction"),
        ("perplexity", "perplexity"),
    ),
    headline=headline,
    concept=concept,
)

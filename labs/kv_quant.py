"""Lab ``kv-quant``: quantize the KV cache, not the weights, and measure the damage.

The same held-out evaluation as ``model-quality``, with every key and value the
attention layers would cache quantized (``kv_format`` at ``granularity``) and the
weights left as trained. Besides KL divergence, perplexity and top-1 agreement,
the KL is shown by position in the window: later tokens attend over more
quantized keys.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from labs.base import Concept, Context, Lab, LabResult, NeedsGPU
from labs.catalog.formats import QUANT_BLOCK_SIZES, QuantFormatKey
from labs.lm import spec
from labs.lm.interval_text import interval_tile, noise_words, perplexity_change, pm
from labs.lm.session import ModelParams, field_error
from labs.viz.tiles import Tile, readable, tile

Granularity = Literal["per-tensor", "per-head", "per-token", "kivi"]
POSITION_BINS = 8


class KVQuantParams(ModelParams):
    kv_format: QuantFormatKey = Field(
        default="int4", title="Cache format", description="Format of the cached keys and values"
    )
    granularity: Granularity = Field(
        default="per-token",
        description="One scale per tensor, per head, per token, or KIVI (keys per channel, "
        "values per token)",
    )
    group: int = Field(
        default=32,
        ge=1,
        le=2048,
        title="KIVI group",
        description="With kivi: tokens sharing one key-channel scale",
    )

    @model_validator(mode="after")
    def _check_kv(self) -> KVQuantParams:
        s = self.model_spec()
        granular = self.kv_format in spec.GRANULAR
        block = QUANT_BLOCK_SIZES[self.kv_format]
        if not granular and self.granularity in ("per-tensor", "per-head"):
            raise field_error(
                self,
                "granularity",
                f"{self.kv_format} has its own blocks of {block}; use per-token or kivi",
            )
        if not granular and block and s.head_dim % block:
            raise field_error(
                self,
                "kv_format",
                f"{self.kv_format} blocks of {block} do not divide head_dim {s.head_dim}",
            )
        if self.granularity == "kivi":
            key_block = self.group if granular else block
            if key_block and self.context % key_block:
                raise field_error(
                    self,
                    "group" if granular else "context",
                    f"kivi key groups of {key_block} tokens do not divide context {self.context}",
                )
        return self


class PositionBin(BaseModel):
    start: int
    stop: int
    kl_divergence: float
    kl_interval: list[float] = Field(default_factory=list, description="95 % over windows")


class KVQuantResult(LabResult):
    model: str
    kv_format: str
    granularity: str
    device: str
    eval_tokens: int
    windows: int
    baseline_perplexity: float
    baseline_perplexity_interval: list[float] = Field(description="95 % interval over windows")
    perplexity: float
    perplexity_interval: list[float]
    perplexity_delta: float
    perplexity_vs_baseline: dict[str, float | int | bool]
    kl_divergence: float
    kl_divergence_interval: list[float]
    window_kl: list[float] = Field(
        default_factory=list, description="Mean KL of each window: what pairs two runs"
    )
    top1_agreement: float
    top1_agreement_interval: list[float]
    kv_bits_per_value: float = Field(description="Stored bits per cached value, scales included")
    kv_bytes_ratio_vs_bf16: float
    kv_bytes_per_token: float = Field(description="Cache bytes per token, all layers, K and V")
    baseline_kv_bytes_per_token: float = Field(description="The same in bf16")
    kl_by_position: list[PositionBin]
    position_trend: dict[str, float | int | bool] = Field(
        description="Paired difference of the last and first position bins' KL, per window"
    )
    finding: str
    seconds: float


def run(params: KVQuantParams, ctx: Context) -> KVQuantResult:
    import time

    from labs.lm import session
    from labs.lm.evaluate import compare
    from labs.lm.kvcache import KVSetting, quantized_kv

    t0 = time.perf_counter()
    ev = session.open_evaluation(params, ctx, 0.0, 0.45)
    setting = KVSetting(
        params.kv_format, params.granularity, params.group, params.kv_format in spec.GRANULAR
    )
    with quantized_kv(ev.model, setting):
        tot = session.score(ev, ctx, 0.45, 0.5, f"KV cache in {params.kv_format}")
    q = session.quality(tot, ev.base)
    bins, trend = _position_bins(tot)
    bits = 8 * setting.nbytes / max(1, setting.numel)
    tokens = tot.windows * params.context
    result = KVQuantResult(
        model=params.model,
        kv_format=params.kv_format,
        granularity=params.granularity,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
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
        kv_bits_per_value=bits,
        kv_bytes_ratio_vs_bf16=setting.nbytes / max(1, setting.bf16_bytes),
        kv_bytes_per_token=setting.nbytes / tokens,
        baseline_kv_bytes_per_token=setting.bf16_bytes / tokens,
        kl_by_position=bins,
        position_trend=trend,
        finding="",
        seconds=time.perf_counter() - t0,
    )
    result.finding = finding(result.model_dump())
    return result


def _position_bins(tot: Any) -> tuple[list[PositionBin], dict[str, float | int | bool]]:
    """KL by position in the window, in POSITION_BINS bins, each with its interval over
    windows, and the paired last-minus-first bin difference: whether later tokens,
    which attend over more quantized keys, really fare worse or it is noise."""
    from labs.lm.intervals import mean_interval, paired_difference

    assert tot.kl_positions is not None
    per_window = tot.kl_positions  # [windows, positions]
    n = per_window.shape[1]
    edges = [round(i * n / POSITION_BINS) for i in range(POSITION_BINS + 1)]
    spans = [(a, b) for a, b in zip(edges, edges[1:], strict=False) if b > a]
    means = [per_window[:, a:b].mean(1).tolist() for a, b in spans]
    bins = []
    for (a, b), values in zip(spans, means, strict=True):
        iv = mean_interval(values, lower=0.0)
        bins.append(
            PositionBin(start=a + 1, stop=b, kl_divergence=iv.estimate, kl_interval=iv.as_list())
        )
    return bins, paired_difference(means[-1], means[0]).as_dict()


def present(r: KVQuantResult, params: KVQuantParams, ctx: Context) -> None:
    """KL by position (figure and table), then the KL and the cache's bits per value."""
    from labs.viz.model_charts import band_line, bars_data

    bins = r.kl_by_position

    ctx.plot(
        "KL divergence by position",
        band_line(
            [(b.start + b.stop) / 2 for b in bins],
            [b.kl_divergence for b in bins],
            [b.kl_interval[0] for b in bins],
            [b.kl_interval[1] for b in bins],
            title=f"KV cache in {params.kv_format}, {params.granularity}: KL by position",
            x_label="position in the window (tokens)",
            y_label="KL, nats per token",
        ),
        {
            "bins": [b.model_dump() for b in bins],
            **bars_data(
                f"KV cache in {params.kv_format}: KL by position",
                [f"{b.start}–{b.stop}" for b in bins],
                [b.kl_divergence for b in bins],
                [b.kl_interval for b in bins],
                "KL, nats per token (whiskers: 95 % interval)",
            ),
        },
        id="kl-by-position",
    )
    ctx.table(
        "KL divergence by position in the window",
        ["positions", "KL nats/token", "95 % interval"],
        [[f"{b.start}–{b.stop}", b.kl_divergence, _span(b.kl_interval)] for b in bins],
    )
    ctx.metric("kl_divergence", r.kl_divergence, "nats", "KL vs full-precision cache")
    ctx.metric("kv_bits_per_value", r.kv_bits_per_value, "bits", "bits per cached value")


def _span(iv: list[float]) -> str:
    from labs.viz.tiles import readable

    return f"{readable(iv[0])} to {readable(iv[1])}"


# --- the verdict: tiles, finding and review question, from the stored result ---

Stored = Mapping[str, Any]  # a stored result (JSON)


def headline(r: Stored) -> list[Tile]:
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


def finding(r: Stored) -> str:
    saved = 100 * (1 - r["kv_bytes_per_token"] / r["baseline_kv_bytes_per_token"])
    bins = r["kl_by_position"]
    trend = noise_words(r.get("position_trend"), "the change from the first to the last positions")
    return (
        f"The {r['kv_format']} cache ({r['granularity']}) stores {readable(r['kv_bits_per_value'])} bits "
        f"per cached value, {readable(saved, 2)} % fewer bytes than bf16. It moves the "
        f"next-token distribution by {pm(r['kl_divergence'], r.get('kl_divergence_interval'), 'nats')} "
        f"of KL and keeps the top token at {pm(r['top1_agreement'], r.get('top1_agreement_interval'), '%', 100)}; "
        f"{perplexity_change(r)}. KL {'rises' if bins[-1]['kl_divergence'] > bins[0]['kl_divergence'] else 'falls'} "
        f"from {readable(bins[0]['kl_divergence'])} nats at positions "
        f"{bins[0]['start']}–{bins[0]['stop']} to {readable(bins[-1]['kl_divergence'])} at "
        f"{bins[-1]['start']}–{bins[-1]['stop']}: {trend}."
    )


def concept(r: Stored, metric: str) -> Concept | None:
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


LAB = Lab(
    id="kv-quant",
    title="Quantize the KV cache",
    summary="Quantize the keys and values a model caches (FP8, int8, int4, NVFP4 …; per tensor, "
    "head, token, or KIVI's per-channel keys) and measure held-out KL, perplexity and "
    "top-1 agreement, with the KL by position in the window.",
    needs_gpu=NeedsGPU.preferred,
    params=KVQuantParams,
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

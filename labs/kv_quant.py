"""Lab ``kv-quant``: quantize the KV cache, not the weights, and measure the damage.

The same held-out evaluation as ``model-quality``, with every key and value the
attention layers would cache quantized (``kv_format`` at ``granularity``) and the
weights left as trained. Besides KL divergence, perplexity and top-1 agreement,
the KL is shown by position in the window: later tokens attend over more
quantized keys.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from labs.base import Context, Lab, LabResult, NeedsGPU
from labs.lm import spec
from labs.lm.session import ModelParams, field_error

Granularity = Literal["per-tensor", "per-head", "per-token", "kivi"]
POSITION_BINS = 8


class KVQuantParams(ModelParams):
    kv_format: spec.FormatKey = Field(
        default="int4", description="labs.quant format of the cached keys and values"
    )
    granularity: Granularity = Field(
        default="per-token",
        description="One scale per tensor, per head, per token, or KIVI (keys per channel, "
        "values per token)",
    )
    group: int = Field(
        default=32, ge=1, le=2048, description="kivi: tokens sharing one key-channel scale"
    )

    @model_validator(mode="after")
    def _check_kv(self) -> KVQuantParams:
        s = self.model_spec()
        granular = self.kv_format in spec.GRANULAR
        block = spec.BLOCK_SIZES[self.kv_format]
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


class KVQuantResult(LabResult):
    model: str
    kv_format: str
    granularity: str
    device: str
    eval_tokens: int
    baseline_perplexity: float
    perplexity: float
    perplexity_delta: float
    kl_divergence: float
    top1_agreement: float
    kv_bits_per_value: float = Field(description="Stored bits per cached value, scales included")
    kv_bytes_ratio_vs_bf16: float
    kl_by_position: list[PositionBin]
    seconds: float


def run(params: KVQuantParams, ctx: Context) -> KVQuantResult:
    import time

    from labs.lm import session
    from labs.lm.kvcache import KVSetting, quantized_kv

    t0 = time.perf_counter()
    ev = session.open_evaluation(params, ctx, 0.0, 0.45)
    setting = KVSetting(
        params.kv_format, params.granularity, params.group, params.kv_format in spec.GRANULAR
    )
    with quantized_kv(ev.model, setting):
        tot = session.score(ev, ctx, 0.45, 0.5, f"KV cache in {params.kv_format}")
    q = session.quality(tot, ev.base)
    assert tot.kl_by_position is not None
    pos = tot.kl_by_position / tot.windows  # mean KL at each predicted position
    n = pos.numel()
    edges = [round(i * n / POSITION_BINS) for i in range(POSITION_BINS + 1)]
    bins = [
        PositionBin(start=a + 1, stop=b, kl_divergence=float(pos[a:b].mean()))
        for a, b in zip(edges, edges[1:], strict=False)
        if b > a
    ]
    from labs.plots import line_chart

    ctx.plot(
        "KL divergence by position",
        line_chart(
            {
                params.granularity: (
                    [(b.start + b.stop) / 2 for b in bins],
                    [b.kl_divergence for b in bins],
                )
            },
            title=f"KV cache in {params.kv_format}: KL by position in the window",
            x_label="position in window (tokens)",
            y_label="KL, nats/token",
        ),
        {"bins": [b.model_dump() for b in bins]},
    )
    ctx.table(
        "KL divergence by position in the window",
        ["positions", "KL nats/token"],
        [[f"{b.start}–{b.stop}", b.kl_divergence] for b in bins],
    )
    bits = 8 * setting.nbytes / max(1, setting.numel)
    ctx.metric("kl_divergence", q["kl_divergence"], "nats", "KL vs full-precision cache")
    ctx.metric("kv_bits_per_value", bits, "bits", "bits per cached value")
    ctx.progress(1.0, "done")
    return KVQuantResult(
        model=params.model,
        kv_format=params.kv_format,
        granularity=params.granularity,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
        baseline_perplexity=ev.base.perplexity(),
        perplexity=q["perplexity"],
        perplexity_delta=q["perplexity_delta"],
        kl_divergence=q["kl_divergence"],
        top1_agreement=q["top1_agreement"],
        kv_bits_per_value=bits,
        kv_bytes_ratio_vs_bf16=setting.nbytes / max(1, setting.bf16_bytes),
        kl_by_position=bins,
        seconds=time.perf_counter() - t0,
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
    time_limit_s=300.0,
    memory_limit_mb=4096,
    numeric_outputs=(("kl_divergence", "nats"), ("perplexity", "perplexity")),
)

"""Cases for kv-bytes-per-token: graded against labs.catalog.facts (lowbit's memory calculator):
kv_bytes_per_token for the registry's GQA models, mla_kv_bytes_per_token for MLA."""

from __future__ import annotations

from labs.catalog import formats
from labs.catalog.facts import MLA_CACHE_SHAPES, kv_bytes_per_token, mla_kv_bytes_per_token
from labs.catalog.models import MODELS
from labs.judge.compare import number_check
from labs.judge.kit import Case

# DeepSeek-V2/V3 config.json fields besides MLA_CACHE_SHAPES' (layers, latent, rope).
MLA_EXTRA = {
    "deepseek-v3": {
        "num_attention_heads": 128,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "hidden_size": 7168,
    },
    "deepseek-v2": {
        "num_attention_heads": 128,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "hidden_size": 5120,
    },
}


def _gqa_config(model: str) -> dict:
    m = MODELS[model]
    return {
        "attention": "gqa",
        "num_layers": m.num_layers,
        "num_attention_heads": m.num_attention_heads,
        "num_kv_heads": m.num_kv_heads,
        "head_dim": m.head_dim,
        "hidden_size": m.hidden_size,
    }


def _mla_config(model: str) -> dict:
    layers, latent, rope = MLA_CACHE_SHAPES[model]
    extra = MLA_EXTRA[model]
    return {
        "attention": "mla",
        "num_layers": layers,
        "kv_lora_rank": latent,
        "qk_rope_head_dim": rope,
        **extra,
    }


def _mistaken(
    c: dict, bpv: float, *, query_heads=False, no_two=False, mla_two=False, mla_per_head=False
):
    if c["attention"] == "gqa":
        heads = c["num_attention_heads"] if query_heads else c["num_kv_heads"]
        return round((1 if no_two else 2) * c["num_layers"] * heads * c["head_dim"] * bpv)
    latent = c["kv_lora_rank"] * (2 if mla_two else 1) + c["qk_rope_head_dim"]
    heads = c["num_attention_heads"] if mla_per_head else 1
    return round(c["num_layers"] * heads * latent * bpv)


MISTAKES = {
    "the query heads were counted; only the KV heads (num_kv_heads) are cached, which is what "
    "GQA saves": {"query_heads": True},
    "only K or only V: each KV head caches both, a factor of 2": {"no_two": True},
    "the latent was counted twice, as if K and V were cached separately; MLA caches one latent "
    "and rebuilds both from it": {"mla_two": True},
    "the latent was counted per head; one latent (and one rotary key) per layer serves every "
    "head": {"mla_per_head": True},
}


def _case(name: str, config: dict, dtype: str, reference, example: bool = False) -> Case:
    bpv = formats.KV_DTYPE_BYTES[dtype]
    mistakes = {
        cause: (lambda kw=kw: _mistaken(config, bpv, **kw)) for cause, kw in MISTAKES.items()
    }
    check = number_check(unit="bytes", mistakes=mistakes)
    return Case(name, (config, bpv), reference, check, example=example)


def _gqa(model: str, dtype: str, example: bool = False) -> Case:
    return _case(
        f"{model}, {dtype}",
        _gqa_config(model),
        dtype,
        lambda: kv_bytes_per_token(model, dtype),
        example,
    )


def _mla(model: str, dtype: str, example: bool = False) -> Case:
    return _case(
        f"{model} (MLA), {dtype}",
        _mla_config(model),
        dtype,
        lambda: mla_kv_bytes_per_token(model, dtype),
        example,
    )


def cases() -> list[Case]:
    hidden = [
        _gqa(m, d) for m in MODELS for d in ("bf16", "fp8") if (m, d) != ("llama-3.1-8b", "bf16")
    ]
    return [
        _gqa("llama-3.1-8b", "bf16", example=True),
        _mla("deepseek-v3", "bf16", example=True),
        *hidden,
        _gqa("qwen2.5-7b", "fp32"),
        _mla("deepseek-v3", "fp8"),
        _mla("deepseek-v2", "bf16"),
    ]

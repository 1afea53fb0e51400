"""Real model configurations and exact parameter arithmetic: ``ModelConfig``, the one
type that describes a decoder's shapes.

A model with a ``config.json`` on disk (the shipped ``lowbit-tiny``, a checkpoint under
the models directory) is read from it (``ModelConfig.from_config``, via
``labs.lm.spec.load_spec``). The registry models of the budget labs are not on disk:
each entry is copied from the model's Hugging Face ``config.json`` (URL in
``source_url``). Parameter counts are computed tensor by tensor from those
shapes, so they match ``sum(p.numel() for p in model.parameters())`` of the
real checkpoint: Llama 3.1 8B → 8,030,261,248; 70B → 70,553,706,496;
405B → 405,853,388,800.

Pure Python on purpose: the web process validates lab parameters with these
ids and content facts are checked against them without importing torch.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, Literal

# K and V: two cached tensors per layer and KV head.
KV_TENSORS_PER_LAYER = 2
# Pre-attention and pre-MLP RMSNorm in every decoder layer.
NORMS_PER_LAYER = 2
# The final RMSNorm after the last layer.
FINAL_NORMS = 1
# A decoder layer's linear layers as Llama, Qwen2 and Mistral checkpoints name them.
ATTENTION = ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj")
MLP = ("mlp.gate_proj", "mlp.up_proj", "mlp.down_proj")
# A LoRA target (as PEFT's short names: q, k, … down) -> the kind of weight it adapts
# (``TensorGroup.kind``): one map for the QLoRA budget lab and the serving facts.
LORA_TARGET_KINDS: dict[str, str] = {
    "q": "attn_q",
    "k": "attn_k",
    "v": "attn_v",
    "o": "attn_o",
    "gate": "mlp_gate",
    "up": "mlp_up",
    "down": "mlp_down",
}

ModelId = Literal[
    "llama-3.1-8b",
    "llama-3.1-70b",
    "llama-3.1-405b",
    "mistral-7b",
    "mixtral-8x7b",
    "qwen2.5-7b",
    "qwen2.5-72b",
]


@dataclass(frozen=True)
class ModelConfig:
    """The shapes of one decoder-only transformer, as its config.json states them."""

    id: str
    name: str
    num_layers: int
    hidden_size: int
    intermediate_size: int  # per expert for MoE models
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    tie_word_embeddings: bool
    max_context: int  # max_position_embeddings, tokens
    num_experts: int = 1  # routed experts per MoE layer; 1 = dense MLP
    num_experts_per_token: int = 1
    qkv_bias: bool = False  # Qwen2 family: q/k/v projections carry biases
    hf_repo: str = ""
    source_url: str = ""
    notes: str = ""
    # A model read from disk: its directory, and the held-out and calibration tokens its
    # lowbit.json counts (written at training time; None when unknown).
    path: Path | None = None
    heldout_tokens: int | None = None
    calibration_tokens: int | None = None

    @classmethod
    def from_config(
        cls, id: str, config: Mapping[str, Any], *, path: Path | None = None, **extra: Any
    ) -> ModelConfig:
        """From a Hugging Face ``config.json`` (a multimodal one's ``text_config``); a
        missing key raises ``KeyError`` naming it."""
        cfg = config.get("text_config", config)
        hidden = int(cfg["hidden_size"])
        heads = int(cfg["num_attention_heads"])
        return cls(
            id=id,
            name=id,
            num_layers=int(cfg["num_hidden_layers"]),
            hidden_size=hidden,
            intermediate_size=int(cfg["intermediate_size"]),
            num_attention_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            head_dim=int(cfg.get("head_dim") or hidden // heads),
            vocab_size=int(cfg["vocab_size"]),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            max_context=int(cfg.get("max_position_embeddings") or 0),
            num_experts=int(cfg.get("num_local_experts") or 1),
            num_experts_per_token=int(cfg.get("num_experts_per_tok") or 1),
            qkv_bias=bool(cfg.get("attention_bias", False)),
            path=path,
            **extra,
        )

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    def linear_names(self, tensors: str = "all") -> list[str]:
        """Full names of the decoder's linear layers: ``model.layers.{i}.self_attn.q_proj`` …"""
        kinds = {"all": ATTENTION + MLP, "attention": ATTENTION, "mlp": MLP}[tensors]
        return [f"model.layers.{i}.{k}" for i in range(self.num_layers) for k in kinds]

    def in_width(self, name: str) -> int:
        """Input width (elements per weight row) of the linear ``name``."""
        if name.endswith("down_proj"):
            return self.intermediate_size
        if name.endswith("o_proj"):
            return self.q_dim
        return self.hidden_size

    def out_width(self, name: str) -> int:
        """Output width (rows) of the linear ``name``."""
        if name.endswith(("gate_proj", "up_proj")):
            return self.intermediate_size
        if name.endswith(("k_proj", "v_proj")):
            return self.kv_dim
        if name.endswith("q_proj"):
            return self.q_dim
        return self.hidden_size


class TPRule(StrEnum):
    """How tensor parallelism (Megatron-style, as vLLM and TensorRT-LLM do it) splits a tensor."""

    column = "column"  # output rows split across GPUs (q, k, v, gate, up)
    row = "row"  # input columns split (o, down)
    vocab = "vocab"  # vocabulary rows split (embedding, lm_head)
    replicated = "replicated"  # every GPU holds a full copy (norms, MoE router)


@dataclass(frozen=True)
class TensorGroup:
    """``count`` identical tensors of shape ``[rows, cols]`` (1-D tensors have rows=1).

    ``linear`` marks the projection matrices that weight quantization formats
    quantize; everything else (embeddings, lm_head, norms, biases, the router)
    stays in 16-bit under the accounting rules of ``labs.catalog.memory``.
    """

    kind: str
    rows: int
    cols: int
    count: int
    linear: bool
    tp: TPRule
    kv_heads: bool = False  # rows are KV heads: replicated, not split, when TP > KV heads

    @property
    def params(self) -> int:
        return self.rows * self.cols * self.count


def _decoder(
    id: str,
    name: str,
    repo: str,
    *,
    layers: int,
    hidden: int,
    inter: int,
    heads: int,
    kv_heads: int,
    vocab: int,
    max_context: int,
    **extra: object,
) -> ModelConfig:
    return ModelConfig(
        id=id,
        name=name,
        hf_repo=repo,
        source_url=f"https://huggingface.co/{repo}/blob/main/config.json",
        num_layers=layers,
        hidden_size=hidden,
        intermediate_size=inter,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=hidden // heads,
        vocab_size=vocab,
        tie_word_embeddings=False,
        max_context=max_context,
        **extra,  # type: ignore[arg-type]
    )


MODELS: dict[str, ModelConfig] = {
    m.id: m
    for m in (
        _decoder(
            "llama-3.1-8b",
            "Llama 3.1 8B",
            "meta-llama/Llama-3.1-8B",
            layers=32,
            hidden=4096,
            inter=14336,
            heads=32,
            kv_heads=8,
            vocab=128256,
            max_context=131072,
        ),
        _decoder(
            "llama-3.1-70b",
            "Llama 3.1 70B",
            "meta-llama/Llama-3.1-70B",
            layers=80,
            hidden=8192,
            inter=28672,
            heads=64,
            kv_heads=8,
            vocab=128256,
            max_context=131072,
        ),
        _decoder(
            "llama-3.1-405b",
            "Llama 3.1 405B",
            "meta-llama/Llama-3.1-405B",
            layers=126,
            hidden=16384,
            inter=53248,
            heads=128,
            kv_heads=8,
            vocab=128256,
            max_context=131072,
        ),
        _decoder(
            "mistral-7b",
            "Mistral 7B v0.3",
            "mistralai/Mistral-7B-v0.3",
            layers=32,
            hidden=4096,
            inter=14336,
            heads=32,
            kv_heads=8,
            vocab=32768,
            max_context=32768,
            notes="v0.3: vocabulary extended to 32768, no sliding window (v0.1 had 32000 and 4096).",
        ),
        _decoder(
            "mixtral-8x7b",
            "Mixtral 8x7B v0.1",
            "mistralai/Mixtral-8x7B-v0.1",
            layers=32,
            hidden=4096,
            inter=14336,
            heads=32,
            kv_heads=8,
            vocab=32000,
            max_context=32768,
            num_experts=8,
            num_experts_per_token=2,
        ),
        _decoder(
            "qwen2.5-7b",
            "Qwen2.5 7B",
            "Qwen/Qwen2.5-7B",
            layers=28,
            hidden=3584,
            inter=18944,
            heads=28,
            kv_heads=4,
            vocab=152064,
            max_context=131072,
            qkv_bias=True,
        ),
        _decoder(
            "qwen2.5-72b",
            "Qwen2.5 72B",
            "Qwen/Qwen2.5-72B",
            layers=80,
            hidden=8192,
            inter=29568,
            heads=64,
            kv_heads=8,
            vocab=152064,
            max_context=131072,
            qkv_bias=True,
        ),
    )
}


def get_model(model_id: str) -> ModelConfig:
    """The registry entry for ``model_id``; ``KeyError`` naming the known ids otherwise."""
    try:
        return MODELS[model_id]
    except KeyError:
        raise KeyError(f"unknown model {model_id!r}; known: {', '.join(MODELS)}") from None


def tensor_groups(model: ModelConfig) -> list[TensorGroup]:
    """Every weight tensor of the model, grouped by kind, with its real shape.

    Linear weights are stored ``[out_features, in_features]`` as in PyTorch,
    so block scales of quantized formats run along ``cols`` (the input dim).
    """
    m = model
    L = m.num_layers
    experts = m.num_experts
    groups = [
        TensorGroup("embedding", m.vocab_size, m.hidden_size, 1, False, TPRule.vocab),
        TensorGroup("attn_q", m.q_dim, m.hidden_size, L, True, TPRule.column),
        TensorGroup("attn_k", m.kv_dim, m.hidden_size, L, True, TPRule.column, kv_heads=True),
        TensorGroup("attn_v", m.kv_dim, m.hidden_size, L, True, TPRule.column, kv_heads=True),
        TensorGroup("attn_o", m.hidden_size, m.q_dim, L, True, TPRule.row),
    ]
    if m.qkv_bias:
        groups += [
            TensorGroup("attn_q_bias", 1, m.q_dim, L, False, TPRule.column),
            TensorGroup("attn_k_bias", 1, m.kv_dim, L, False, TPRule.column, kv_heads=True),
            TensorGroup("attn_v_bias", 1, m.kv_dim, L, False, TPRule.column, kv_heads=True),
        ]
    groups += [
        TensorGroup(
            "mlp_gate", m.intermediate_size, m.hidden_size, L * experts, True, TPRule.column
        ),
        TensorGroup("mlp_up", m.intermediate_size, m.hidden_size, L * experts, True, TPRule.column),
        TensorGroup("mlp_down", m.hidden_size, m.intermediate_size, L * experts, True, TPRule.row),
    ]
    if m.is_moe:
        groups.append(
            TensorGroup("router", m.num_experts, m.hidden_size, L, False, TPRule.replicated)
        )
    groups.append(
        TensorGroup(
            "norm", 1, m.hidden_size, NORMS_PER_LAYER * L + FINAL_NORMS, False, TPRule.replicated
        )
    )
    if not m.tie_word_embeddings:
        groups.append(TensorGroup("lm_head", m.vocab_size, m.hidden_size, 1, False, TPRule.vocab))
    return groups


def param_counts(model: ModelConfig) -> dict[str, int]:
    """Parameters per tensor kind (all experts included), in registry order."""
    return {g.kind: g.params for g in tensor_groups(model)}


def param_count(model: ModelConfig) -> int:
    """Total parameters, every expert counted (what the checkpoint stores)."""
    return sum(param_counts(model).values())


def active_param_count(model: ModelConfig) -> int:
    """Parameters one token touches: for MoE only ``num_experts_per_token`` experts' MLPs."""
    total = 0
    for g in tensor_groups(model):
        if model.is_moe and g.kind in ("mlp_gate", "mlp_up", "mlp_down"):
            total += g.rows * g.cols * model.num_layers * model.num_experts_per_token
        else:
            total += g.params
    return total


def kv_values_per_token(model: ModelConfig) -> int:
    """Cached K and V elements per token over all layers: 2 × layers × KV heads × head dim."""
    return KV_TENSORS_PER_LAYER * model.num_layers * model.num_kv_heads * model.head_dim


def linear_shapes(model: ModelConfig) -> list[TensorGroup]:
    """Only the projection matrices (the tensors LoRA targets and weight formats quantize)."""
    return [g for g in tensor_groups(model) if g.linear]

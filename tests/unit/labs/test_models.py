"""Model registry: shapes from the real config.json files and exact parameter counts."""

from __future__ import annotations

from typing import get_args

import pytest

from labs.catalog import memory
from labs.catalog.models import (
    MODELS,
    ModelId,
    active_param_count,
    get_model,
    kv_values_per_token,
    param_count,
    param_counts,
    tensor_groups,
)

# sum(p.numel() for p in model.parameters()) of the released checkpoints.
GOLDEN_PARAMS = {
    "llama-3.1-8b": 8_030_261_248,
    "llama-3.1-70b": 70_553_706_496,
    "llama-3.1-405b": 405_853_388_800,
    "mistral-7b": 7_248_023_552,
    "mixtral-8x7b": 46_702_792_704,
    "qwen2.5-7b": 7_615_616_512,
    "qwen2.5-72b": 72_706_203_648,
}
# 2 (K, V) × layers × KV heads × head_dim × 2 bytes.
GOLDEN_KV_BF16 = {
    "llama-3.1-8b": 2 * 32 * 8 * 128 * 2,
    "llama-3.1-70b": 2 * 80 * 8 * 128 * 2,
    "llama-3.1-405b": 2 * 126 * 8 * 128 * 2,
    "mistral-7b": 2 * 32 * 8 * 128 * 2,
    "mixtral-8x7b": 2 * 32 * 8 * 128 * 2,
    "qwen2.5-7b": 2 * 28 * 4 * 128 * 2,
    "qwen2.5-72b": 2 * 80 * 8 * 128 * 2,
}


def test_registry_ids_match_the_literal_used_by_lab_params():
    assert set(get_args(ModelId)) == set(MODELS)


@pytest.mark.parametrize("model_id", sorted(MODELS))
def test_every_model_cites_its_hugging_face_config(model_id):
    m = MODELS[model_id]
    assert m.source_url == f"https://huggingface.co/{m.hf_repo}/blob/main/config.json"
    assert m.head_dim * m.num_attention_heads == m.hidden_size


@pytest.mark.parametrize(("model_id", "expected"), sorted(GOLDEN_PARAMS.items()))
def test_parameter_counts_match_the_released_checkpoints(model_id, expected):
    assert param_count(get_model(model_id)) == expected


def test_the_headline_numbers():
    m70 = get_model("llama-3.1-70b")
    assert param_count(m70) == pytest.approx(70.55e9, abs=0.01e9)
    assert memory.weight_bytes(m70, "bf16") / 1e9 == pytest.approx(141.1, abs=0.05)
    assert memory.kv_bytes_per_token(m70, "bf16") == 327_680 == 320 * 1024
    assert memory.kv_bytes_per_token(get_model("llama-3.1-8b"), "bf16") == 131_072 == 128 * 1024
    assert memory.kv_bytes_per_token(get_model("llama-3.1-405b"), "bf16") == 516_096
    assert param_count(get_model("llama-3.1-8b")) / 1e9 == pytest.approx(8.03, abs=0.005)
    assert param_count(get_model("llama-3.1-405b")) / 1e9 == pytest.approx(405.85, abs=0.005)


@pytest.mark.parametrize(("model_id", "expected"), sorted(GOLDEN_KV_BF16.items()))
def test_kv_bytes_per_token(model_id, expected):
    model = get_model(model_id)
    assert memory.kv_bytes_per_token(model, "bf16") == expected
    assert memory.kv_bytes_per_token(model, "fp8") == expected // 2
    assert memory.kv_bytes_per_token(model, "fp32") == expected * 2
    assert kv_values_per_token(model) * 2 == expected


def test_per_kind_counts_of_llama_70b():
    counts = param_counts(get_model("llama-3.1-70b"))
    assert counts["embedding"] == counts["lm_head"] == 128256 * 8192
    assert counts["attn_q"] == counts["attn_o"] == 80 * 8192 * 8192
    assert counts["attn_k"] == counts["attn_v"] == 80 * 1024 * 8192
    assert counts["mlp_gate"] == counts["mlp_up"] == counts["mlp_down"] == 80 * 28672 * 8192
    assert counts["norm"] == (2 * 80 + 1) * 8192
    assert "attn_q_bias" not in counts and "router" not in counts


def test_qwen_has_qkv_biases_and_no_o_bias():
    counts = param_counts(get_model("qwen2.5-7b"))
    assert counts["attn_q_bias"] == 28 * 3584
    assert counts["attn_k_bias"] == counts["attn_v_bias"] == 28 * 4 * 128
    assert not any(k.startswith("attn_o_") for k in counts)


def test_mixtral_experts_router_and_active_parameters():
    m = get_model("mixtral-8x7b")
    counts = param_counts(m)
    assert counts["mlp_gate"] == 32 * 8 * 14336 * 4096
    assert counts["router"] == 32 * 8 * 4096
    # Two of eight experts per token: the published 12.9B active parameters.
    assert active_param_count(m) == 12_879_925_248
    assert active_param_count(get_model("llama-3.1-8b")) == param_count(get_model("llama-3.1-8b"))


def test_only_projection_matrices_are_marked_linear():
    kinds = {g.kind for g in tensor_groups(get_model("mixtral-8x7b")) if g.linear}
    assert kinds == {"attn_q", "attn_k", "attn_v", "attn_o", "mlp_gate", "mlp_up", "mlp_down"}


def test_unknown_model_names_the_known_ones():
    with pytest.raises(KeyError, match="llama-3.1-8b"):
        get_model("llama-4")


def test_a_config_json_builds_the_same_model_the_registry_holds():
    # Llama 3.1 8B's config.json (the keys the type reads): the registry's hand-copied
    # shapes and the config read from disk are one type and agree.
    from labs.catalog.models import MODELS, ModelConfig, param_count

    config = {
        "hidden_size": 4096,
        "intermediate_size": 14336,
        "num_attention_heads": 32,
        "num_hidden_layers": 32,
        "num_key_value_heads": 8,
        "vocab_size": 128256,
        "max_position_embeddings": 131072,
        "tie_word_embeddings": False,
    }
    read = ModelConfig.from_config("llama-3.1-8b", config)
    assert param_count(read) == param_count(MODELS["llama-3.1-8b"]) == 8_030_261_248
    assert read.linear_names()[:2] == [
        "model.layers.0.self_attn.q_proj",
        "model.layers.0.self_attn.k_proj",
    ]


def test_the_shipped_model_is_read_from_its_config_json():
    import json

    from labs.lm import models, spec

    s = spec.load_spec(models.SHIPPED)
    cfg = json.loads((models.SHIPPED_DIR / "config.json").read_text(encoding="utf-8"))
    assert (s.num_layers, s.hidden_size, s.num_kv_heads) == (
        cfg["num_hidden_layers"],
        cfg["hidden_size"],
        cfg["num_key_value_heads"],
    )
    assert s.path == models.SHIPPED_DIR and s.max_context == cfg["max_position_embeddings"]

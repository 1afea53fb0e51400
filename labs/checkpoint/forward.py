"""One forward pass of the tiny Llama-style decoder, to prove every tensor is wired right."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from labs.checkpoint.awq import awq_dequantize
from labs.checkpoint.layout import head_dim

if TYPE_CHECKING:
    import torch

FORWARD_TOKENS = 8


def dense_weights(
    state: dict[str, torch.Tensor], config: dict[str, Any]
) -> dict[str, torch.Tensor]:
    """fp32 weights by unquantized name; AWQ linears are dequantized."""
    qc = config.get("quantization_config") or {}
    out: dict[str, torch.Tensor] = {}
    for name, t in state.items():
        if name.endswith(".qweight"):
            module = name.removesuffix(".qweight")
            out[f"{module}.weight"] = awq_dequantize(
                t, state[f"{module}.qzeros"], state[f"{module}.scales"], int(qc.get("bits", 4))
            )
        elif not name.endswith((".qzeros", ".scales")):
            out[name] = t.float()
    return out


def forward(
    weights: dict[str, torch.Tensor], config: dict[str, Any], tokens: torch.Tensor
) -> torch.Tensor:
    """Logits [tokens, vocab] of the Llama-style decoder (causal attention, no rotary
    embedding: enough to prove every tensor is wired where the config says)."""
    import torch
    import torch.nn.functional as F

    eps = float(config["rms_norm_eps"])
    heads, kv_heads, hd = (
        config["num_attention_heads"],
        config["num_key_value_heads"],
        head_dim(config),
    )

    def rms(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    x = weights["model.embed_tokens.weight"][tokens]
    t = x.shape[0]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}"
        h = rms(x, weights[f"{p}.input_layernorm.weight"])
        q = (h @ weights[f"{p}.self_attn.q_proj.weight"].T).view(t, heads, hd).transpose(0, 1)
        k = (h @ weights[f"{p}.self_attn.k_proj.weight"].T).view(t, kv_heads, hd).transpose(0, 1)
        v = (h @ weights[f"{p}.self_attn.v_proj.weight"].T).view(t, kv_heads, hd).transpose(0, 1)
        k = k.repeat_interleave(heads // kv_heads, dim=0)
        v = v.repeat_interleave(heads // kv_heads, dim=0)
        a = (
            F.scaled_dot_product_attention(q, k, v, is_causal=True)
            .transpose(0, 1)
            .reshape(t, heads * hd)
        )
        x = x + a @ weights[f"{p}.self_attn.o_proj.weight"].T
        h = rms(x, weights[f"{p}.post_attention_layernorm.weight"])
        gate = F.silu(h @ weights[f"{p}.mlp.gate_proj.weight"].T)
        x = (
            x
            + (gate * (h @ weights[f"{p}.mlp.up_proj.weight"].T))
            @ weights[f"{p}.mlp.down_proj.weight"].T
        )
    x = rms(x, weights["model.norm.weight"])
    head = weights.get("lm_head.weight", weights["model.embed_tokens.weight"])
    return x @ head.T

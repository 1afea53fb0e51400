"""Issue 23's named errors: each stays fixed, checked against code where code decides.

The generic checks (facts, ``app.content.rules``, ``app.content.audit_rules``) cover
the kinds of error; these tests pin the specific claims the audit named, so a rewrite
cannot bring them back.
"""

from __future__ import annotations

from functools import cache

import pytest

from app.content import Catalogue, load_catalogue
from app.settings import ROOT
from labs.catalog import facts
from labs.registry import lab_ids

LLAMA_8B = "llama-3.1-8b"


@cache
def catalogue() -> Catalogue:
    return load_catalogue(ROOT / "content", lab_ids())


def text(slug: str) -> str:
    cat = catalogue()
    owner = cat.terms.get(slug) or cat.lessons[slug]
    return owner.source


def item(slug: str, item_id: str):  # noqa: ANN201 - a quiz item of any type
    found = catalogue().quiz_item(f"term:{slug}", item_id)
    assert found is not None, f"{slug}: no quiz item {item_id}"
    return found


def test_sparsity_says_vllm_removed_2_4_and_what_runs_today() -> None:
    body = text("sparsity-2-4")
    assert "vLLM supports 2:4 checkpoints" not in body
    assert "Sparse24 models are no longer supported by vLLM" in body
    assert "v0.19" in body and "v0.15" in body  # Sparse24 (#36799) and Marlin 2:4 (#32688)
    assert "to_sparse_semi_structured" in body and "sparsify_" in body


def test_calculate_kv_scales_divisors_and_removal() -> None:
    body = text("kv-cache-quantization")
    assert "`calculate_kv_scales=True`: amax of the first batch / 448" not in body
    assert "`K_SCALE_CONSTANT` (200)" in body and "`V_SCALE_CONSTANT` (100)" in body
    assert "#49389" in body
    headroom = item("kv-cache-quantization", "headroom-200")
    assert headroom.answer == facts.dtype_max("fp8_e4m3") * 50 / 200


def test_marlin_bound_is_bytes_read_not_file_sizes() -> None:
    body = text("marlin")
    assert "5.70 GB instead of 16.06 GB" not in body
    read = facts.weight_bytes_read_per_step(LLAMA_8B, "bf16") / facts.weight_bytes_read_per_step(
        LLAMA_8B, "int4"
    )
    assert item("marlin", "bound-whole").answer == pytest.approx(read, abs=1e-3)
    assert "15.01 GB" in body and "4.65 GB" in body


def test_a_chunk_hides_under_the_batch_32_memory_time() -> None:
    body = text("chunked-prefill")
    assert "8–14 ms longer" not in body
    memory = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096, what="memory")
    compute = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096, chunk_tokens=512, what="compute")
    assert compute < memory
    step = facts.decode_step_ms(LLAMA_8B, "h100", 32, 4096, chunk_tokens=512)
    assert item("chunked-prefill", "decode-step").answer == pytest.approx(step, rel=5e-3)


def test_flash_attention_traffic_in_kernel_fusion() -> None:
    answer = item("kernel-fusion", "flash-why").model_answer
    assert "O(seq × head_dim) bytes" not in answer
    assert "N²·d²/M" in answer and "O(N)" in answer


def test_mla_latent_is_replicated_under_tensor_parallelism() -> None:
    body = text("multi-head-latent-attention")
    assert "several times more context per GPU" not in body
    per_gpu = item("multi-head-latent-attention", "per-gpu-tp8").answer
    assert per_gpu == facts.mla_kv_bytes_per_token("deepseek-v3", "bf16", 8)
    assert per_gpu > facts.kv_bytes_per_token_per_gpu("llama-3.1-405b", "bf16", 8)
    assert "data-parallel attention" in body


def test_delayed_scaling_multiplies_by_two_to_the_margin() -> None:
    body = text("fp8-training")
    assert r"/ (\text{fp8 max} \cdot 2^{\text{margin}})" not in body
    assert r"\cdot 2^{\text{margin}} / \text{fp8 max}" in body
    # the card's later advice ("increase the margin") only holds in this direction
    assert facts.delayed_scaling_scale(100, "fp8_e4m3", 2) > facts.delayed_scaling_scale(100)


def test_exl2_engines_and_successor() -> None:
    body = text("exl2")
    assert "vLLM, TGI and llama.cpp do not load EXL2" not in body
    assert "--quantize exl2" in body and "archived" in body and "ExLlamaV3" in body


def _compiles(dynamic: bool | None, mark: bool = False) -> int:
    """Graphs Dynamo compiles for ten sequence lengths (backend eager: no code generation)."""
    import torch
    import torch._dynamo as dynamo
    from torch._dynamo.utils import counters

    dynamo.reset()
    counters.clear()
    compiled = torch.compile(lambda x: (x * 2).sum(-1), backend="eager", dynamic=dynamic)
    for length in range(512, 522):
        x = torch.randn(2, length)
        if mark:
            dynamo.mark_dynamic(x, 1)
        compiled(x)
    graphs = counters["stats"]["unique_graphs"]
    dynamo.reset()
    return graphs


def test_torch_compile_recompile_counts_are_what_the_card_says() -> None:
    """The audit found the card's exercise assuming a recompile per length by default."""
    assert item("torch-compile", "recompiles").answer == _compiles(None) == 2
    body = text("torch-compile")
    assert "10 prompt lengths cost 2 compiles by default, 1 with `dynamic=True`" in body
    assert _compiles(True) == 1 and _compiles(None, mark=True) == 1
    assert _compiles(False) == 8  # one per length until recompile_limit, then eager

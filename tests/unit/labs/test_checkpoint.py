"""labs.checkpoint: the tensor table, AWQ packing, and the loader on broken checkpoints."""

from __future__ import annotations

import json

import torch

from labs import checkpoint as ck


def test_missing_shard_lists_what_it_held(tmp_path):
    ck.build_checkpoint(str(tmp_path), "bf16", "missing-shard", seed=0)
    report = ck.inspect_checkpoint(str(tmp_path))
    missing = next(f for f in report.files if not f.present)
    assert missing.name == ck.shard_name(ck.MISSING_SHARD) and missing.bytes_on_disk == 0
    (finding,) = report.findings
    assert "layers 1" in finding.expected and "Re-download only" in finding.next_step


def test_the_loader_finds_a_truncated_shard(tmp_path):
    ck.build_checkpoint(str(tmp_path), "bf16", "none", seed=0)
    path = tmp_path / ck.shard_name(3)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    report = ck.inspect_checkpoint(str(tmp_path))
    codes = {f.code for f in report.findings if f.severity == "error"}
    assert "unreadable-shard" in codes and report.state_dict is None


def test_the_loader_finds_quantized_tensors_without_a_quantization_config(tmp_path):
    ck.build_checkpoint(str(tmp_path), "awq", "none", seed=0)
    config_path = tmp_path / ck.CONFIG_FILE
    config = json.loads(config_path.read_text())
    del config["quantization_config"]
    config_path.write_text(json.dumps(config))
    report = ck.inspect_checkpoint(str(tmp_path))
    errors = [f for f in report.findings if f.severity == "error"]
    assert [f.code for f in errors] == ["quant-config-mismatch"]
    assert errors[0].tensor and errors[0].tensor.endswith(".qweight")


def test_expected_table_follows_the_config():
    plain = ck.expected_tensors(ck.TINY_CONFIG)
    layers = ck.TINY_CONFIG["num_hidden_layers"]
    # embeddings + (2 norms + 7 linears) per layer + final norm + lm_head
    assert len(plain) == 1 + layers * (2 + 7) + 1 + 1
    assert plain["model.layers.0.self_attn.k_proj.weight"].shape == (128, 256)  # 2 KV heads × 64
    awq = ck.expected_tensors({**ck.TINY_CONFIG, "quantization_config": ck.AWQ_QUANT_CONFIG})
    assert len(awq) == 1 + layers * (2 + 7 * 3) + 1 + 1
    q = "model.layers.0.mlp.down_proj"
    assert awq[f"{q}.qweight"].shape == (512, 32)  # [in, out / 8]
    assert awq[f"{q}.scales"].shape == (4, 256) and awq[f"{q}.scales"].dtype == "F16"


def test_awq_packing_order_matches_autoawq():
    codes = torch.arange(8, dtype=torch.int64).reshape(1, 8)
    (word,) = ck.awq_pack(codes, 4).flatten().tolist()
    # Nibble i holds output column AWQ_PACK_ORDER[i]: 0, 2, 4, 6, 1, 3, 5, 7.
    assert [(word >> (4 * i)) & 0xF for i in range(8)] == [0, 2, 4, 6, 1, 3, 5, 7]
    gen = torch.Generator().manual_seed(1)
    many = torch.randint(0, 16, (64, 128), generator=gen)
    packed = ck.awq_pack(many, 4)
    assert packed.dtype == torch.int32 and packed.shape == (64, 16)
    assert torch.equal(ck.awq_unpack(packed, 4), many)


def test_awq_quantization_error_is_within_one_step():
    gen = torch.Generator().manual_seed(2)
    w = torch.randn(64, 256, generator=gen) * 0.02
    parts, decoded = ck.awq_quantize(w, 4, 128)
    back = ck.awq_dequantize(parts["qweight"], parts["qzeros"], parts["scales"], 4)
    assert torch.equal(back, decoded)  # the loader's dequantization is the writer's
    step = parts["scales"].float().T.repeat_interleave(128, dim=1)  # [out, in]
    assert back.shape == w.shape
    assert bool(((back - w).abs() <= step * 1.01).all())
    assert float((back - w).abs().mean()) < float(step.mean()) / 2

"""shard-doctor: a real safetensors checkpoint, each fault found with the right finding."""

from __future__ import annotations

import os
from typing import get_args

import pytest
from pydantic import ValidationError

from labs import checkpoint as ck
from labs import shard_doctor as sd
from tests.unit.labs.helpers import run_lab


def test_fixed_fault_names():
    assert set(get_args(ck.FaultKey)) == {
        "none",
        "missing-shard",
        "shape-mismatch",
        "dtype-mismatch",
        "quant-config-mismatch",
    }
    assert sd.Params.model_fields["fault"].annotation is ck.FaultKey


def test_bad_params_are_rejected():
    with pytest.raises(ValidationError, match="fault"):
        sd.Params.model_validate({"fault": "missing-file"})
    with pytest.raises(ValidationError, match="checkpoint"):
        sd.Params.model_validate({"checkpoint": "gguf"})
    with pytest.raises(ValidationError):
        sd.Params.model_validate({"seed": -1})


@pytest.mark.parametrize("checkpoint", ["bf16", "awq"])
def test_a_clean_checkpoint_loads_and_runs(tmp_path, checkpoint):
    result, events = run_lab(sd, {"checkpoint": checkpoint}, tmpdir=tmp_path)
    assert result.clean and result.loaded and result.errors == 0 and result.warnings == 0
    assert result.findings == []
    # The logits of the loaded model equal those of the weights that were written.
    assert result.logits_max_abs_diff == 0.0
    assert result.tensors_found == result.tensors_expected
    assert result.tensor_bytes_found == result.total_size_bytes
    assert [f.name for f in result.files] == [ck.shard_name(k) for k in (1, 2, 3)]
    kinds = {kind for kind, _ in events}
    assert {"progress", "table", "metric", "plot", "log"} <= kinds
    assert events[-1] == ("progress", {"fraction": 1.0, "message": "done"})
    # Everything was written inside the run's private directory.
    written = os.listdir(tmp_path / f"checkpoint-{checkpoint}-none")
    assert {ck.CONFIG_FILE, ck.INDEX_FILE} <= set(written)


# (checkpoint, fault) -> (code, file, tensor, expected, found)
CASES = {
    ("bf16", "missing-shard"): (
        "missing-shard",
        "model-00002-of-00003.safetensors",
        None,
        "9 tensors",
        "no such file",
    ),
    ("bf16", "shape-mismatch"): (
        "shape-mismatch",
        "model-00002-of-00003.safetensors",
        "model.layers.1.self_attn.k_proj.weight",
        "[128, 256]",
        "[256, 256]",
    ),
    ("bf16", "dtype-mismatch"): (
        "dtype-mismatch",
        "model-00001-of-00003.safetensors",
        "model.layers.0.mlp.down_proj.weight",
        "BF16",
        "F16",
    ),
    ("bf16", "quant-config-mismatch"): (
        "quant-config-mismatch",
        "config.json",
        "model.layers.0.self_attn.q_proj.weight",
        "qweight",
        "no qweight",
    ),
    ("awq", "missing-shard"): (
        "missing-shard",
        "model-00002-of-00003.safetensors",
        None,
        "23 tensors",
        "no such file",
    ),
    ("awq", "shape-mismatch"): (
        "shape-mismatch",
        "model-00002-of-00003.safetensors",
        "model.layers.1.self_attn.q_proj.qweight",
        "[256, 32]",
        "[32, 256]",
    ),
    ("awq", "dtype-mismatch"): (
        "dtype-mismatch",
        "model-00001-of-00003.safetensors",
        "model.layers.0.mlp.down_proj.scales",
        "F16",
        "BF16",
    ),
    ("awq", "quant-config-mismatch"): (
        "quant-config-mismatch",
        "config.json",
        "model.layers.0.self_attn.q_proj.scales",
        "group_size=128",
        "group_size 64",
    ),
}


@pytest.mark.parametrize(("checkpoint", "fault"), sorted(CASES))
def test_each_fault_is_found_with_one_specific_finding(tmp_path, checkpoint, fault):
    code, file, tensor, expected, found = CASES[(checkpoint, fault)]
    result, events = run_lab(sd, {"checkpoint": checkpoint, "fault": fault}, tmpdir=tmp_path)
    assert not result.clean and not result.loaded and result.forward is None
    errors = [f for f in result.findings if f.severity == "error"]
    assert len(errors) == 1, [(f.code, f.tensor) for f in errors]  # no cascade of follow-ups
    (finding,) = errors
    assert finding.code == code and finding.file == file
    if tensor:
        assert finding.tensor == tensor
    assert expected in finding.expected and found in finding.found
    assert finding.next_step and finding.detail
    table = next(d for k, d in events if k == "table" and d["title"] == "Findings")
    assert table["rows"][0][1] == code


def test_group_size_finding_names_both_loader_outcomes(tmp_path):
    # A loader that sizes its buffers from config.json fails; one that trusts the file's
    # shapes but the config's group size serves garbage. The finding must say both.
    result, _ = run_lab(
        sd, {"checkpoint": "awq", "fault": "quant-config-mismatch"}, tmpdir=tmp_path
    )
    (finding,) = [f for f in result.findings if f.severity == "error"]
    assert "size mismatch" in finding.detail and "from config.json" in finding.detail
    assert "garbage output" in finding.detail

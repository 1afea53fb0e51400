"""labs.concepts: each review question's right choice is the one the run's
result makes right, checked here against the result by other means, on runs chosen so
that the right choice differs between them."""

from __future__ import annotations

from typing import Any

import pytest

from labs import concepts
from labs.base import Concept, EventContext
from labs.registry import get_lab
from labs.viz.tiles import readable


def _result(lab_id: str, params: dict[str, Any]) -> dict[str, Any]:
    lab = get_lab(lab_id)
    assert lab is not None
    out = lab.execute(lab.validate(params), EventContext(lambda k, d: None))
    return out.model_dump(mode="json")


def _concept(lab_id: str, params: dict[str, Any], metric: str = "") -> tuple[Concept, dict]:
    lab = get_lab(lab_id)
    assert lab is not None and lab.concept is not None
    r = _result(lab_id, params)
    c = lab.concept(r, metric or lab.numeric_outputs[0][0])
    assert c is not None
    assert len(c.choices) == len(set(c.choices)) == 3 and 0 <= c.answer < 3  # noqa: PLR2004
    assert "Your run" in c.explanation or "your run" in c.explanation
    return c, r


@pytest.mark.parametrize(
    ("params", "part"),
    [
        ({"model": "llama-3.1-70b", "gpu": "h100", "tensor_parallel": 2}, "weight"),
        (
            {"model": "llama-3.1-8b", "gpu": "h100", "batch": 64, "context_tokens": 8192},
            "KV cache",
        ),
    ],
)
def test_memory_budget_asks_for_the_largest_part(params: dict[str, Any], part: str) -> None:
    c, r = _concept("memory-budget", params)
    parts = [r["weights_bytes_per_gpu"], r["kv_cache_bytes_per_gpu"], r["overhead_bytes_per_gpu"]]
    assert c.answer == parts.index(max(parts))
    assert part in c.choices[c.answer]
    assert f"{readable(r['total_bytes_per_gpu'] / 1e9)} GB" in c.prompt


def test_granularity_compare_answer_is_the_best_row() -> None:
    for distribution in ("outliers", "normal"):
        c, r = _concept("granularity-compare", {"distribution": distribution, "shape": [64, 64]})
        best = max(r["rows"], key=lambda row: row["error"]["sqnr_db"])["granularity"]
        assert best == r["best_by_sqnr"]
        assert c.choices[c.answer].endswith(best.removeprefix("block ") + " values") or (
            best in ("tensor", "channel") and best in c.choices[c.answer]
        )
        for row in r["rows"]:
            assert f"{readable(row['error']['sqnr_db'])} dB" in c.explanation


def test_dot_product_scales_worst_placement_and_accumulator() -> None:
    c, r = _concept("dot-product-scales", {"outliers": True}, "rel_error_b")
    worst = max(r["placements"], key=lambda p: p["rel_error_vs_fp32"])
    assert c.choices[c.answer] == worst["name"]
    c, r = _concept("dot-product-scales", {}, "int16_overflow_k")
    assert c.answer == 0 and f"after {r['int16_overflow_k']} terms" in c.choices[0]
    assert f"{r['accumulator']['max_product']:,}" in c.choices[0]


def test_qlora_budget_names_the_largest_component() -> None:
    c, r = _concept("qlora-budget", {})
    largest = max(r["components"], key=lambda x: x["bytes"])["name"]
    assert c.choices[c.answer] == largest


def test_fp8_savings_memory_or_compute_bound() -> None:
    small, r = _concept("fp8-savings", {"batch": 1})
    assert r["bf16"]["bound"] == "memory" and small.answer == 0
    big, r = _concept("fp8-savings", {"model": "llama-3.1-8b", "batch": 512, "context_tokens": 128})
    assert big.answer == (0 if r["bf16"]["bound"] == "memory" else 1)
    assert readable(r["speedup_same_batch"]) in big.prompt


def test_kv_capacity_fp8_doubles_and_block_quantize_and_scales() -> None:
    c, r = _concept("kv-capacity", {})
    assert c.answer == 0 and str(r["fp8_max_concurrent_requests"]) in c.choices[0]
    c, r = _concept("block-quantize", {"format": "q4_0", "shape": [32, 64]})
    assert c.answer == 0 and f"blocks of {r['block_size']} values" in c.prompt
    c, r = _concept("scale-derivation", {})
    assert readable(r["scale"], 4) in c.prompt and c.answer == 0


def test_a_result_lacking_a_key_gives_no_question() -> None:
    # a stored result from before a key existed: review asks for the number instead
    assert concepts.memory_budget({"weights_gb": 141.1}, "weights_gb") is None
    assert concepts.fp8_savings({}, "speedup_same_batch") is None
    low_gain = {**_result("kv-capacity", {}), "fp8_concurrency_gain": 1.0}
    assert concepts.kv_capacity(low_gain, "total_blocks") is None


def test_every_predictable_output_fits_the_notebook_columns() -> None:
    """PostgreSQL refuses a string longer than its column (SQLite stores it): the
    scale-derivation lab's unit "value units per element step" (28 characters in a
    String(20)) made every numeric prediction of its scale a 422 there."""
    from app.db import NotebookEntry
    from labs.registry import all_labs

    unit_len = NotebookEntry.__table__.c.predicted_unit.type.length
    metric_len = NotebookEntry.__table__.c.metric.type.length
    for lab in all_labs().values():
        for key, unit in lab.numeric_outputs:
            assert len(unit) <= unit_len and len(key) <= metric_len, (lab.id, key, unit)
        for c in lab.choice_outputs:
            assert len(c.key) <= metric_len, (lab.id, c.key)


@pytest.mark.parametrize(("gpu", "answer"), [("h100", 0), ("t4", 1)])
def test_format_support_asks_what_a_decode_step_reads(gpu: str, answer: int) -> None:
    """fp8 on an H100 stays 8-bit in memory; on a T4 the path upcasts to fp16 at load, so a
    decode step reads 16 bits per parameter: the right choice follows the result."""
    c, r = _concept("format-support", {"format": "fp8", "gpu": gpu})
    assert (r["resident_bits_per_param"] < 16) == (answer == 0)  # noqa: PLR2004
    assert c.answer == answer
    assert readable(r["decode_bytes_ratio"], 3) in c.explanation


def test_reproducibility_asks_when_a_top1_prediction_flips() -> None:
    c, r = _concept("reproducibility", {}, "fp8_top1_agreement")
    assert readable(r["fp8_max_abs_diff"]) in c.prompt
    assert f"{readable(100 * r['fp8_top1_agreement'])} %" in c.prompt
    assert c.choices[c.answer].startswith("Only where the two highest logits")


@pytest.mark.parametrize(("fault", "short"), [("missing-shard", True), ("shape-mismatch", False)])
def test_shard_doctor_asks_what_total_size_checks(fault: str, short: bool) -> None:
    c, r = _concept("shard-doctor", {"fault": fault}, "errors")
    assert (r["tensor_bytes_found"] < r["total_size_bytes"]) == short
    assert ("fall short" in c.explanation) == short
    assert f"{r['tensors_found']} of the {r['tensors_expected']} tensors" in c.prompt


def test_vram_observe_asks_what_sets_the_weights_memory() -> None:
    c, r = _concept("vram-observe", {}, "weights_mib")
    dtype = r["summaries"][0]["dtype"]
    per_param = r["weights_mib"] * 2**20 / r["param_count"]
    assert f"{readable(per_param, 3)} bytes per parameter for {dtype}" in c.explanation
    assert c.answer == 0

"""Headline tiles of the labs whose modules are already long: each function maps a
stored result (JSON) to the 3–5 numbers its run page leads with (labs.viz.tiles).
Torch-free and free of the lab modules' imports, so a lab module can import its
function to register it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from labs.viz.tiles import Tile, readable, tile

Result = Mapping[str, Any]


def _fit_tone(headroom: float) -> str:
    return "warn" if headroom < 0 else ""


def granularity_compare(r: Result) -> list[Tile]:
    """SQNR per tensor and per block 32, what the block's scales cost, the best choice
    per stored bit, and how much of the per-tensor error is clipping."""
    rows = {row["granularity"]: row for row in r["rows"]}
    tensor = rows["tensor"]["error"]
    share = tensor["clipping_mse"] / tensor["mse"] if tensor["mse"] > 0 else 0.0
    return [
        tile(
            "SQNR, one scale per tensor",
            r["sqnr_db_tensor"],
            "dB",
            key="sqnr_db_tensor",
            means="the largest |value| sets the step of every value",
        ),
        tile(
            "SQNR, one scale per 32 values",
            r["sqnr_db_block_32"],
            "dB",
            key="sqnr_db_block_32",
            means=f"+{readable(r['sqnr_gain_db_block_32'])} dB over per tensor",
        ),
        tile(
            "Bits per value, block 32",
            r["bits_per_value_block_32"],
            "bits",
            key="bits_per_value_block_32",
            means=f"scales cost {readable(r['scale_overhead_bytes_block_32'] / 1024)} KiB here",
        ),
        tile(
            "Best SQNR per stored bit",
            r["best_by_sqnr_per_bit"],
            key="best_by_sqnr_per_bit",
            means=f"best SQNR outright: {r['best_by_sqnr']}",
        ),
        tile(
            "Clipping share, per tensor",
            share * 100,
            "%",
            key="rows.0.error.clipping_mse",
            means=f"rounding MSE {readable(tensor['rounding_mse'])}, "
            f"clipping MSE {readable(tensor['clipping_mse'])}",
        ),
    ]


def scale_derivation(r: Result) -> list[Tile]:
    """amax, the scale it gives, the SQNR, the worst error and what was clipped."""
    err = r["error"]
    return [
        tile("amax (largest |x|)", r["amax"], key="amax", means=f"from {r['scale_source']}"),
        tile(
            "Scale",
            r["scale"],
            key="scale",
            means=f"amax / {readable(r['qmax'])}: what one element step is worth",
        ),
        tile("SQNR", err["sqnr_db"], "dB", key="error.sqnr_db", means="signal over error power"),
        tile(
            "Max |error|",
            r["max_abs_error"],
            key="max_abs_error",
            means=f"half a step is {readable(r['scale'] / 2)}: more means clipping",
        ),
        tile(
            "Values clipped",
            r["clipped"],
            key="clipped",
            means=f"of {r['n_values']:,}; clipping MSE {readable(err['clipping_mse'])}",
            tone="warn" if r["clipped"] else "",
        ),
    ]


def memory_budget(r: Result) -> list[Tile]:
    """Weights, what one GPU needs against what it has, headroom, and the TP that fits."""
    tp = r["tensor_parallel"]
    fits = "fits" if r["fits"] else "does not fit"
    return [
        tile(
            "Weights",
            r["weights_gb"],
            "GB",
            key="weights_gb",
            means=f"{r['param_count'] / 1e9:.1f} B parameters in {r['weight_format']}",
        ),
        tile(
            "Needed per GPU",
            r["total_gb_per_gpu"],
            "GB",
            key="total_gb_per_gpu",
            means=f"weights, KV cache and overhead at TP {tp}",
        ),
        tile(
            "Headroom per GPU",
            r["headroom_gb_per_gpu"],
            "GB",
            key="headroom_gb_per_gpu",
            means=f"{fits} in {readable(r['gpu_capacity_gb'])} GB ({r['gpu']})",
            tone=_fit_tone(r["headroom_gb_per_gpu"]),
        ),
        tile(
            "KV cache per token",
            r["kv_bytes_per_token"],
            "bytes",
            key="kv_bytes_per_token",
            means=f"every layer's K and V in {r['kv_dtype']}",
        ),
        tile(
            "Smallest TP that fits",
            r["min_tensor_parallel"],
            "GPUs",
            key="min_tensor_parallel",
            means="tensor-parallel GPUs sharing the weights",
        ),
    ]


def kv_capacity(r: Result) -> list[Tile]:
    """KV bytes per token, the pool, requests at once (and with fp8 KV), queueing."""
    return [
        tile("KV cache per token", r["kv_bytes_per_token"], "bytes", key="kv_bytes_per_token"),
        tile(
            "KV pool per GPU",
            r["pool_gb_per_gpu"],
            "GB",
            key="pool_gb_per_gpu",
            means=f"{r['total_blocks']:,} blocks of {r['block_bytes'] // 1024:,} KiB",
        ),
        tile(
            "Requests at once",
            r["max_concurrent_requests"],
            key="max_concurrent_requests",
            means=f"{r['max_concurrent_without_sharing']:,} without prefix sharing",
        ),
        tile(
            "…with fp8 KV",
            r["fp8_max_concurrent_requests"],
            key="fp8_max_concurrent_requests",
            means=f"{readable(r['fp8_concurrency_gain'])}× as many",
        ),
        tile(
            "Requests wait?",
            "yes" if r["requests_wait"] else "no",
            key="requests_wait",
            means=f"the load needs {readable(r['occupancy_needed'])} in service at once",
            tone="warn" if r["requests_wait"] else "",
        ),
    ]


def qlora_budget(r: Result) -> list[Tile]:
    """What trains, what the frozen base costs, the total against the GPU, micro-batch."""
    return [
        tile(
            "Trainable parameters",
            r["trainable_params"],
            key="trainable_params",
            means=f"{readable(r['trainable_percent'])} % of the model (LoRA adapters)",
        ),
        tile(
            "Base weights",
            r["base_weights_gb"],
            "GB",
            key="base_weights_gb",
            means=f"{readable(r['base_bits_per_quantized_param'])} bits per quantized weight",
        ),
        tile(
            "Total needed",
            r["total_gb"],
            "GB",
            key="total_gb",
            means=f"of {readable(r['gpu_capacity_gb'])} GB on the {r['gpu']}",
        ),
        tile(
            "Headroom",
            r["headroom_gb"],
            "GB",
            key="headroom_gb",
            means=r["verdict"],
            tone=_fit_tone(r["headroom_gb"]),
        ),
        tile("Largest micro-batch (sequences)", r["max_micro_batch"], key="max_micro_batch"),
    ]


def vram_observe(r: Result) -> list[Tile]:
    """What was measured (VRAM, or host RSS on a CPU) first, then weights, activations
    per sequence and, on CUDA, the largest batch and the CUDA context."""
    cpu = r["device"] == "cpu"
    first = r["summaries"][0]
    acts = r["activation_mib_per_sequence"]
    tiles = [
        tile(
            "Measured",
            "host RSS, not VRAM" if cpu else "VRAM",
            key="measured",
            means="a CPU run: no GPU memory, allocator cache, CUDA context or OOM point"
            if cpu
            else r["device_name"],
            tone="warn" if cpu else "",
        ),
        tile(
            f"Weights measured ({first['dtype']})",
            r["weights_mib"],
            "MiB",
            key="weights_mib",
            means=f"rule of thumb: {readable(first['weights_estimate_bytes'] / 2**20)} MiB",
        ),
        tile(
            f"Activations per sequence ({first['dtype']})",
            acts if acts is not None else "not measurable here",
            "MiB" if acts is not None else "",
            key="activation_mib_per_sequence",
            means="slope of the peak against the batch",
            tone="" if acts is not None else "warn",
        ),
    ]
    if not cpu:
        tiles += [
            tile("Largest batch that fit", r["largest_batch"], key="largest_batch"),
            tile(
                "CUDA context",
                r["cuda_context_mib"],
                "MiB",
                key="cuda_context_mib",
                means="outside PyTorch's allocator; nvidia-smi counts it",
            ),
        ]
    return tiles

"""The review questions wrong predictions of the calculator and tensor labs come back as.

A wrong number is a sign the learner missed the idea behind it, so review asks about
the idea, built from the run's own numbers: which change would help most, which part is
largest, why a speed-up stops short of 2×. The right choice is computed from the stored
result (never assumed), and the explanation quotes the run. Every function takes a
stored result (JSON) and the metric predicted, imports no torch, and returns None where
the result lacks what its question needs (the review then asks for the number again).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import wraps
from typing import Any

from labs.base import Concept
from labs.viz.tiles import readable, readable_bytes

Result = Mapping[str, Any]
ConceptFn = Callable[[Result, str], Concept | None]
FP8_GAIN_WORTH_ASKING = 1.2  # below this an fp8 cache changed little: no question about it
INT16_MAX = 32_767


def _tolerant(fn: ConceptFn) -> ConceptFn:
    """A result stored before a key existed gives no question rather than an error."""

    @wraps(fn)
    def wrapper(r: Result, metric: str) -> Concept | None:
        try:
            return fn(r, metric)
        except (KeyError, IndexError, TypeError, ValueError, ZeroDivisionError):
            return None

    return wrapper


def _gb(n: float) -> str:
    return f"{readable(n / 1e9)} GB"


def _pick(choices: Sequence[str], right: str, explanation: str, prompt: str) -> Concept:
    return Concept(prompt, tuple(choices), list(choices).index(right), explanation)


@_tolerant
def block_quantize(r: Result, metric: str) -> Concept | None:
    shape = "×".join(str(d) for d in r["shape"])
    bits, block = r["bits_per_value"], r["block_size"]
    sqnr = r["metrics"]["sqnr_db"]
    return Concept(
        prompt=f"Your {r['format']} run on a {shape} tensor stored {readable(bits, 4)} bits per "
        f"value in blocks of {block} values (SQNR {readable(sqnr)} dB). The same format with "
        "blocks twice as large: what happens to the bits per value, and why?",
        choices=(
            "They fall: each block's scale is shared by twice as many values",
            "They stay the same: a value's bits are set by its element format alone",
            "They rise: a larger block needs a wider scale",
        ),
        answer=0,
        explanation="Bits per value = the element's bits + the scale's bits ÷ the block size. "
        f"Your run kept {r['n_blocks']:,} scales for {r['numel']:,} values: "
        f"{r['nbytes']:,} bytes, {readable(bits, 4)} bits per value against "
        f"{readable(r['nominal_bits_per_value'], 4)} nominal. Twice the block halves the scales' "
        "share, and costs accuracy: one scale must then cover a wider range of values.",
    )


@_tolerant
def scale_derivation(r: Result, metric: str) -> Concept | None:
    return Concept(
        prompt=f"Your {r['format']} run derived the scale {readable(r['scale'], 4)} from amax "
        f"{readable(r['amax'], 4)} ({r['n_values']} values; its largest error "
        f"{readable(r['max_abs_error'])}). Derived from an amax twice as large, what happens "
        "to the rounding error of the values in range?",
        choices=(
            "It roughly doubles: the scale doubles, and so does every step between codes",
            "It stays the same: each value is rounded on its own",
            "It halves: a larger range gives more codes",
        ),
        answer=0,
        explanation=f"Your run: scale = amax ÷ the format's largest code ({readable(r['amax'], 4)} ÷ "
        f"{readable(r['qmax'], 4)} = {readable(r['scale'], 4)} here): the codes stay the same, "
        "so the values they stand for spread twice as far apart, and rounding to the nearest "
        "one errs twice as much. That is why one outlier that sets amax coarsens every other "
        "value (and why clipping it can pay).",
    )


def _granularity_words(g: str) -> str:
    if g == "tensor":
        return "One scale for the whole tensor"
    if g == "channel":
        return "One scale per channel (row)"
    return f"One scale per {g.removeprefix('block ')} values"


@_tolerant
def granularity_compare(r: Result, metric: str) -> Concept | None:
    rows = {row["granularity"]: row for row in r["rows"]}
    best = r["best_by_sqnr"]
    shown = list(dict.fromkeys(["tensor", best, r["rows"][-1]["granularity"], "channel"]))[:3]
    if best not in rows or len(shown) < 3 or any(g not in rows for g in shown):  # noqa: PLR2004
        return None

    def line(g: str) -> str:
        row = rows[g]
        return f"{g}: SQNR {readable(row['error']['sqnr_db'])} dB at {readable(row['bits_per_value'], 4)} bits"

    shape = "×".join(str(d) for d in r["shape"])
    return _pick(
        [_granularity_words(g) for g in shown],
        _granularity_words(best),
        explanation="A scale must cover the largest value it serves, so the fewer values "
        "share one, the fewer are coarsened by an outlier; each scale costs bytes. "
        f"Your run: {'; '.join(line(g) for g in rows)}.",
        prompt=f"Your {r['format']} run on a {shape} {r['distribution']} tensor (largest value "
        f"{readable(r['tensor_absmax'])}): which of these scale granularities gave the highest "
        "SQNR, and why?",
    )


@_tolerant
def dot_product_scales(r: Result, metric: str) -> Concept | None:
    if metric in ("int16_overflow_k", "int32_max_k"):
        acc = r["accumulator"]
        return Concept(
            prompt=f"Your {r['format']} run multiplies codes up to {readable(acc['element_max'])}. "
            "Why does an integer GEMM accumulate in int32 rather than int16?",
            choices=(
                f"One product reaches {acc['max_product']:,}, so an int16 sum (at most "
                f"{INT16_MAX:,}) can overflow after {acc['int16_overflow_k']} terms",
                "int16 adders are slower than int32 ones on tensor cores",
                "The products have fractional bits that int16 cannot hold",
            ),
            answer=0,
            explanation=f"Products of two codes reach {acc['max_product']:,}; int32 holds "
            f"{acc['int32_max_k']:,} of them in the worst case, more than any K of a real "
            f"layer. Your run's largest sum was {acc['observed_max_abs_sum']:,.0f}.",
        )
    places = r["placements"]
    worst = max(places, key=lambda p: p["rel_error_vs_fp32"])
    return _pick(
        [p["name"] for p in places],
        worst["name"],
        explanation="A scale is a common factor of the dot product only if it is the same "
        "for every term of the sum: per-row (per-output) scales can be applied after it, "
        "scales that change along K (blocks) must be applied inside it, per block. Your run: "
        + "; ".join(f"{p['name']}: {readable(100 * p['rel_error_vs_fp32'])} %" for p in places)
        + ".",
        prompt=f"Your {r['format']} {r['m']}×{r['k']}×{r['n']} run ({r['granularity']}"
        f"{', with outliers' if r['outliers'] else ''}): which placement of the scales gave "
        "the largest error against fp32, and why?",
    )


@_tolerant
def memory_budget(r: Result, metric: str) -> Concept | None:
    parts = {
        "Halve the bytes per weight (e.g. bf16 → fp8)": r["weights_bytes_per_gpu"],
        "Halve the KV cache (an fp8 cache, or half the batch × context)": r[
            "kv_cache_bytes_per_gpu"
        ],
        "Halve the runtime overhead": r["overhead_bytes_per_gpu"],
    }
    biggest = max(parts, key=lambda k: parts[k])
    return _pick(
        list(parts),
        biggest,
        explanation="Halving a part frees half of it, so the largest part is the lever. "
        f"Your run per GPU: weights {_gb(r['weights_bytes_per_gpu'])}, KV cache "
        f"{_gb(r['kv_cache_bytes_per_gpu'])}, overhead {_gb(r['overhead_bytes_per_gpu'])}; "
        f"total {_gb(r['total_bytes_per_gpu'])} of {_gb(r['gpu_capacity_bytes'])}.",
        prompt=f"Your run: {r['model']} in {r['weight_format']} ({r['kv_dtype']} cache) on "
        f"{r['gpu']} at tensor parallel {r['tensor_parallel']} needs "
        f"{_gb(r['total_bytes_per_gpu'])} per GPU. Which one change frees the most memory "
        "per GPU?",
    )


@_tolerant
def qlora_budget(r: Result, metric: str) -> Concept | None:
    comps = sorted(r["components"], key=lambda c: -c["bytes"])[:3]
    biggest = comps[0]["name"]
    shown = [c["name"] for c in r["components"] if c in comps]  # in the lab's order
    return _pick(
        shown,
        biggest,
        explanation="QLoRA shrinks the quantized projection weights to about 4 bits; what it "
        "does not shrink (unquantized embeddings and head, logits over the vocabulary, "
        "activations, the runtime) then decides the budget. Your run: "
        + "; ".join(f"{c['name']} {readable_bytes(c['bytes'])}" for c in r["components"])
        + f"; total {_gb(r['total_bytes'])}.",
        prompt=f"Your QLoRA run of {r['model']} on {r['gpu']} needs {_gb(r['total_bytes'])}. "
        "Which of these parts of its memory is the largest?",
    )


@_tolerant
def kv_capacity(r: Result, metric: str) -> Concept | None:
    gain = r["fp8_concurrency_gain"]
    if gain < FP8_GAIN_WORTH_ASKING:
        return None
    return Concept(
        prompt=f"Your run: {r['model']} on {r['gpu']} keeps {r['kv_bytes_per_token']:,} bytes of "
        f"KV cache per token in a {_gb(r['pool_bytes_per_gpu'])} pool: {r['total_blocks']:,} "
        f"blocks, {r['max_concurrent_requests']} requests at once. What does an fp8 KV cache "
        "do to the number of concurrent requests?",
        choices=(
            f"About {readable(gain, 2)}× as many ({r['fp8_max_concurrent_requests']}): each "
            "token's keys and values take half the bytes, so the same pool holds twice the tokens",
            f"Nothing ({r['max_concurrent_requests']}): the weights, not the cache, fill the GPU",
            "Half as many: an fp8 cache needs a scale beside every value",
        ),
        answer=0,
        explanation="Concurrency is the pool divided by each request's blocks; the pool is "
        "what is left after the weights, and a block's bytes are its tokens × bytes per token. "
        f"Halving bytes per token doubles the blocks: {r['max_concurrent_requests']} → "
        f"{r['fp8_max_concurrent_requests']} requests in your run.",
    )


@_tolerant
def fp8_savings(r: Result, metric: str) -> Concept | None:
    bf16, fp8 = r["bf16"], r["fp8"]
    choices = (
        "The bytes each step reads: FP8 halves the weight bytes, but the bf16 KV cache and "
        "the fixed per-step cost stay",
        "The matmul rate: the step is compute-bound, and FP8 tensor cores do about twice "
        "bf16's work per second",
        "Neither: FP8 saves memory, never time",
    )
    return Concept(
        prompt=f"Your run: {r['model']} on {r['gpu']} at batch {r['batch']} × "
        f"{r['context_tokens']:,} tokens. FP8 weights made one decode step "
        f"{readable(r['speedup_same_batch'])}× faster ({readable(bf16['step_ms'])} → "
        f"{readable(fp8['step_ms'])} ms). What sets that speed-up?",
        choices=choices,
        answer=0 if bf16["bound"] == "memory" else 1,
        explanation=f"Your run: the bf16 step is {bf16['bound']}-bound. It reads "
        f"{_gb(bf16['step_weight_bytes'])} of weights and {_gb(bf16['step_kv_bytes'])} of KV "
        f"cache; with FP8 weights {_gb(fp8['step_weight_bytes'])} and "
        f"{_gb(fp8['step_kv_bytes'])}. A memory-bound step speeds up by the bytes saved, "
        "a compute-bound one by the faster matmul; only the weights get smaller.",
    )


BF16_BITS = 16


@_tolerant
def format_support(r: Result, metric: str) -> Concept | None:
    resident, file_bits = r["resident_bits_per_param"], r["file_bits_per_param"]
    packed = resident < BF16_BITS
    return Concept(
        prompt=f"Your run: {r['format_title']} on {r['gpu_name']} (compute capability "
        f"{r['compute_capability']}) takes the path '{r['kernel']}', computing in {r['compute']}. "
        f"The file stores {readable(file_bits, 4)} bits per parameter. How many bytes does a "
        "decode step read for the quantized matrices, and why?",
        choices=(
            "Fewer than bf16's: the weights stay packed in memory and the kernel expands "
            "them in registers as it reads them",
            "bf16's: the weights are expanded to 16 bits when the model loads, so memory "
            "holds and reads 16 bits per parameter",
            "Half of bf16's whatever the format: every quantized path reads 8 bits per weight",
        ),
        answer=0 if packed else 1,
        explanation=f"Your run: {readable(resident, 4)} bits per parameter resident, so a decode "
        f"step reads {readable(r['decode_bytes_ratio'], 3)}× bf16's bytes for those matrices "
        f"(a bound of {readable(r['decode_speedup_bound'], 3)}× on a memory-bound step). "
        + (
            "The path keeps the stored format resident; what the GPU computes in does not "
            "change what it reads."
            if packed
            else f"The path upcasts to {r['upcast_to'] or 'bf16'} at load, so the file's saving "
            "stays on disk."
        ),
    )


@_tolerant
def reproducibility(r: Result, metric: str) -> Concept | None:
    fmt = "fp8" if metric.startswith("fp8") else "int8"
    agree, diff = r[f"{fmt}_top1_agreement"], r[f"{fmt}_max_abs_diff"]
    if agree is None or diff is None:
        return None
    batch = r["input_shape"][0]
    return Concept(
        prompt=f"Your run: {fmt} weights moved the logits by up to {readable(diff)}, and the "
        f"top-1 token agreed with fp32 on {readable(100 * agree)} % of the {batch} inputs. "
        "When does quantization change a top-1 prediction?",
        choices=(
            "Only where the two highest logits were closer than the error it added",
            "Whenever any logit moves: top-1 is as fragile as the largest difference",
            "Never: rounding is deterministic, so the ranking cannot change",
        ),
        answer=0,
        explanation="A prediction flips only if the error lifts the runner-up above the "
        f"leader: a gap wider than the error keeps it. Your run's largest error was "
        f"{readable(diff)} and {readable(100 * (1 - agree))} % of the inputs had a gap "
        "smaller than the error they received. The same rounding every time keeps one "
        "run reproducible; it does not keep it equal to fp32.",
    )


@_tolerant
def shard_doctor(r: Result, metric: str) -> Concept | None:
    short = r["tensor_bytes_found"] < r["total_size_bytes"]
    return Concept(
        prompt=f"Your run ({r['fault']}): the shards hold {r['tensors_found']} of the "
        f"{r['tensors_expected']} tensors the index lists, {readable_bytes(r['tensor_bytes_found'])} "
        f"against the index's total_size of {readable_bytes(r['total_size_bytes'])}. What does "
        "total_size let a loader check before it loads a tensor?",
        choices=(
            "That the shards hold every tensor's bytes: a sum below it means missing tensors "
            "or shards",
            "The size of the index file itself, to detect a truncated download",
            "The GPU memory the model will need, KV cache included",
        ),
        answer=0,
        explanation="model.safetensors.index.json's metadata.total_size is the sum of every "
        "tensor's bytes over all shards; each shard's header says where each tensor lies. "
        + (
            "Your run's shards fall short of it, so a loader can refuse before reading a weight."
            if short
            else "Your run's shards add up to it, so what it found (if anything) is inside "
            f"the tensors or the config: {r['errors']} errors. {r['summary']}"
        ),
    )


@_tolerant
def vram_observe(r: Result, metric: str) -> Concept | None:
    first = r["summaries"][0]
    per_param = r["weights_mib"] * 2**20 / r["param_count"]
    return Concept(
        prompt=f"Your run measured {r['param_count']:,} parameters in {first['dtype']} taking "
        f"{readable(r['weights_mib'])} MiB ({r['measured']}). What sets the weights' memory, "
        "and what does a larger batch add?",
        choices=(
            "Parameters × bytes per parameter; a batch adds activations (and KV cache), "
            "not weights",
            "The batch: every sequence needs its own copy of the weights",
            "The CUDA context: it grows with the model",
        ),
        answer=0,
        explanation=f"Your run: {readable(per_param, 3)} bytes per parameter for {first['dtype']}; "
        + (
            f"each sequence added about {readable(r['activation_mib_per_sequence'])} MiB of "
            "activations, which is what bounds the batch."
            if r["activation_mib_per_sequence"] is not None
            else "this device could not separate activations per sequence."
        ),
    )

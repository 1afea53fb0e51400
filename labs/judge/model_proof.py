"""The proof on a model: once a learner's quantizer matches the reference bytes on the
hidden cases, it quantizes every decoder linear of lowbit's shipped model and the model is
judged by the evaluation contract's KL divergence and top-1 agreement, beside the same
model quantized by lowbit's reference.

Trusted code, outside the sandbox: ``execute`` runs the learner's function (one call per
weight, the weight flattened to 1-D: its rows are multiples of the block, so the blocks are
those of a per-row quantization). The learner's bytes are decoded here, by code that
checks their length, and never run.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from labs.judge.kit import Call, CallResult

if TYPE_CHECKING:
    import torch

PROOF_TOKENS = 2048  # held-out tokens evaluated (the first ones of heldout.txt)
PROOF_CONTEXT = 128  # tokens per window
Q8_0_BLOCK = 32
Q8_0_BLOCK_BYTES = 2 + 32


class ProofError(ValueError):
    """The learner's function failed on a weight or returned something undecodable."""


def q8_0_values(data: bytes, n: int) -> torch.Tensor:
    """float32 values of ``n`` elements' GGUF Q8_0 blocks (fp16 d, then 32 int8 codes)."""
    import torch

    expected = -(-n // Q8_0_BLOCK) * Q8_0_BLOCK_BYTES
    if len(data) != expected:
        raise ProofError(f"{len(data)} bytes for {n} values; Q8_0 needs {expected}")
    rows = torch.frombuffer(bytearray(data), dtype=torch.uint8).reshape(-1, Q8_0_BLOCK_BYTES)
    d = rows[:, :2].contiguous().view(torch.float16).float()
    codes = rows[:, 2:].contiguous().view(torch.int8).float()
    return (codes * d).reshape(-1)[:n]


DECODERS: dict[str, Callable[[bytes, int], Any]] = {"q8_0": q8_0_values}


@dataclass
class ModelProof:
    format: str
    tensors: int  # decoder linears quantized
    identical_tensors: int  # of them, how many the learner's bytes match the reference's on
    learner: dict[str, float]  # perplexity, perplexity_delta, kl_divergence, top1_agreement
    reference: dict[str, float]
    eval_tokens: int
    context: int
    seconds: float

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _learner_weights(
    originals: dict[str, Any], fmt: str, results: Sequence[CallResult]
) -> tuple[dict[str, Any], dict[str, Any], int]:
    from labs.quant import quantize

    decode = DECODERS[fmt]
    learner, reference, identical = {}, {}, 0
    for (name, w), result in zip(originals.items(), results, strict=False):
        if result.error is not None:
            raise ProofError(f"your function failed on {name} {tuple(w.shape)}:\n{result.error}")
        if not isinstance(result.value, bytes):
            raise ProofError(f"{name}: expected bytes, got a {type(result.value).__name__}")
        q = quantize(w.reshape(-1), fmt)
        identical += result.value == q.to_bytes()
        learner[name] = decode(result.value, w.numel()).reshape(w.shape)
        reference[name] = q.dequantize().reshape(w.shape)
    if len(learner) != len(originals):
        raise ProofError(f"your function ran on {len(learner)} of {len(originals)} weights")
    return learner, reference, identical


def model_proof(
    function: str,
    fmt: str,
    execute: Callable[[list[Call]], Sequence[CallResult]],
    *,
    eval_tokens: int = PROOF_TOKENS,
    context: int = PROOF_CONTEXT,
) -> ModelProof:
    """Quantize the shipped model's decoder linears with the learner's ``function`` (bytes in
    ``fmt``) and with ``labs.quant``; evaluate both against the unquantized model."""
    import torch

    from labs.lm import models
    from labs.lm.evaluate import evaluate, windows
    from labs.lm.session import quality, token_ids

    if fmt not in DECODERS:
        raise ValueError(f"no model proof for {fmt!r}; known: {', '.join(DECODERS)}")
    start = time.perf_counter()
    loaded = models.load(models.SHIPPED)
    linears = {
        name: m
        for name, m in loaded.model.named_modules()
        if isinstance(m, torch.nn.Linear) and name.startswith("model.layers.")
    }
    originals = {name: m.weight.detach().clone() for name, m in linears.items()}
    calls = [Call(function, (w.reshape(-1).contiguous(),)) for w in originals.values()]
    learner, reference, identical = _learner_weights(originals, fmt, execute(calls))
    w = windows(token_ids(loaded, models.HELDOUT_FILE)[:eval_tokens], context)
    torch.manual_seed(0)
    base, ref_logits = evaluate(loaded.model, w, keep_reference=True)
    scores = {}
    with torch.no_grad():
        for label, weights in (("learner", learner), ("reference", reference)):
            for name, value in weights.items():
                linears[name].weight.copy_(value)
            tot, _ = evaluate(loaded.model, w, reference=ref_logits)
            scores[label] = quality(tot, base)
    return ModelProof(
        fmt,
        len(originals),
        identical,
        scores["learner"],
        scores["reference"],
        eval_tokens,
        context,
        round(time.perf_counter() - start, 3),
    )

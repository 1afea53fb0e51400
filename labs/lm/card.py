"""The model card (``README.md``) of ``lowbit-tiny`` and the fixed greedy sample it shows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from labs.lm import corpus

SAMPLE_PROMPT = "The default encoding of a file"
SAMPLE_TOKENS = 40


def greedy_sample(
    model: Any, tok: Any, prompt: str = SAMPLE_PROMPT, new_tokens: int = SAMPLE_TOKENS
) -> str:
    """Greedy continuation of ``prompt`` (no sampling, so it is reproducible)."""
    import torch

    ids = torch.tensor([tok.encode(prompt, add_special_tokens=False).ids])
    with torch.no_grad():
        out = model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens,
            do_sample=False,
            pad_token_id=model.config.eos_token_id,
        )
    return str(tok.decode(out[0, ids.shape[1] :].tolist()))


CARD_FORMATS: tuple[tuple[str, dict[str, Any]], ...] = (
    ("q8_0", {}),
    ("q6_k", {}),
    ("q4_k", {}),
    ("q4_0", {}),
    ("nvfp4", {}),
    ("mxfp4", {}),
    ("int4", {"granularity": 128}),
    ("int4", {"granularity": "tensor"}),
)
CARD_EVAL_TOKENS = 8192


def measure_quantization(model: Any, tok: Any, heldout: str, context: int) -> list[dict[str, Any]]:
    """Held-out quality of every decoder linear quantized to each of CARD_FORMATS
    (round-to-nearest, the evaluation contract on the first CARD_EVAL_TOKENS tokens)."""
    from labs.lm.evaluate import evaluate, windows
    from labs.lm.fakequant import WeightEditor, quantize_model

    ids = tok.encode(heldout, add_special_tokens=False).ids[:CARD_EVAL_TOKENS]
    w = windows(ids, context)
    base, ref = evaluate(model, w, keep_reference=True)
    names = [
        n
        for n, m in model.named_modules()
        if n.startswith("model.layers.") and n.rsplit(".", 1)[-1].endswith("_proj")
    ]
    editor = WeightEditor(model)
    rows = [
        {
            "format": "float32 (trained)",
            "bits": 32.0,
            "perplexity": base.perplexity(),
            "kl_divergence": 0.0,
            "top1_agreement": 1.0,
        }
    ]
    for fmt, opts in CARD_FORMATS:
        reports = quantize_model(editor, names, fmt, opts)
        tot, _ = evaluate(model, w, reference=ref)
        editor.restore()
        label = fmt + ("" if not opts else f" ({', '.join(f'{k}={v}' for k, v in opts.items())})")
        rows.append(
            {
                "format": label,
                "bits": 8 * sum(r.nbytes for r in reports) / sum(r.numel for r in reports),
                "perplexity": tot.perplexity(),
                "kl_divergence": tot.kl_divergence(),
                "top1_agreement": tot.top1_agreement(),
            }
        )
    return rows


def _quality_section(f: dict[str, Any]) -> str:
    rows = f.get("quantization")
    if not rows:
        return ""
    lines = [
        "## Quantized (round-to-nearest, every decoder linear layer)",
        "",
        f"Held-out text, first {CARD_EVAL_TOKENS:,} tokens; KL from the float32 model in nats "
        "per token. `lowbit lab run model-quality --param format=… --param eval_tokens=8192` "
        "reproduces a row.",
        "",
        "| format | bits/weight | perplexity | KL | top-1 agreement |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['format']} | {r['bits']:.3g} | {r['perplexity']:.2f} | "
            f"{r['kl_divergence']:.2e} | {100 * r['top1_agreement']:.1f} % |"
        )
    return "\n".join(lines) + "\n\n"


def write(out: Path, f: dict[str, Any]) -> None:
    """Write ``out/README.md`` from the training figures."""
    c = f["config"]
    held = ", ".join(f["heldout_documents"])
    text = f"""---
license: psf-2.0
language: en
library_name: transformers
pipeline_tag: text-generation
---

# lowbit-tiny

A small Llama-architecture causal language model that lowbit trains and ships
so that every quantization format can be judged by what it does to a model.

## Architecture

`LlamaForCausalLM` (RMSNorm, RoPE, grouped-query attention, SwiGLU MLP, untied
embedding and head): hidden {c["hidden_size"]}, intermediate {c["intermediate_size"]},
{c["num_hidden_layers"]} layers, {c["num_attention_heads"]} query heads and
{c["num_key_value_heads"]} key/value heads (head dim
{c["hidden_size"] // c["num_attention_heads"]}), vocabulary {c["vocab_size"]}
(byte-level BPE trained with `tokenizers` on the training split only).
{f["params"]:,} parameters, stored in float32. Every linear layer's input width
({c["hidden_size"]} or {c["intermediate_size"]}) is a multiple of 256, so every
`labs.quant` format applies, k-quant super-blocks included.

## Corpus and licence

{corpus.CORPUS_NAME}: the reStructuredText sources (`_sources/**/*.rst.txt`)
of the Python documentation, as installed by `apt-get install python3.11-doc`.
Licence: {corpus.CORPUS_LICENCE}. The weights are released under the same terms.

## Split

By document, in sorted path order: every {corpus.HELDOUT_EVERY}th document is
held out and never seen in training (neither by the tokenizer nor the model).
{f["train_documents"]} training documents; {len(f["heldout_documents"])} held out: {held}.
`heldout.txt` is those documents joined by blank lines (the first
{corpus.HELDOUT_MAX_CHARS:,} characters): {f["heldout_tokens"]:,} tokens.
`calibration.txt` (what GPTQ and AWQ calibrate on) is training text only: every
{corpus.CALIBRATION_EVERY}th training document, the first
{corpus.CALIBRATION_MAX_CHARS:,} characters. `lowbit.json` holds both token counts.

## Training

Command: `lowbit model train` (seed {c["seed"]}, {c["threads"]} CPU thread).
AdamW (betas 0.9/0.95, weight decay {c["weight_decay"]}), peak learning rate
{c["lr"]} after {c["warmup_steps"]} warm-up steps, cosine decay to {c["min_lr"]};
gradient clipping {c["grad_clip"]}; {c["batch_size"]} random windows of
{c["context"]} tokens per step.

| figure | value |
|---|---|
| steps | {f["steps"]:,} |
| tokens seen | {f["tokens_seen"]:,} |
| training stream | {f["train_stream_tokens"]:,} tokens (about {f["tokens_seen"] / f["train_stream_tokens"]:.1f} epochs) |
| training wall time | {f["train_seconds"] / 60:.1f} min on 1 CPU thread |
| train perplexity | {f["train_perplexity"]:.2f} |
| held-out perplexity | {f["heldout_perplexity"]:.2f} |

Perplexities follow the evaluation contract (non-overlapping windows of
{c["context"]} tokens; held-out: all {f["eval_windows"]} windows of `heldout.txt`;
train: the same number of tokens from the start of the training stream).

{_quality_section(f)}## Greedy sample

Prompt `{SAMPLE_PROMPT}`, {SAMPLE_TOKENS} new tokens, greedy:

```text
{SAMPLE_PROMPT}{f["sample"]}
```
"""
    (out / "README.md").write_text(text, encoding="utf-8")

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

## Greedy sample

Prompt `{SAMPLE_PROMPT}`, {SAMPLE_TOKENS} new tokens, greedy:

```text
{SAMPLE_PROMPT}{f["sample"]}
```
"""
    (out / "README.md").write_text(text, encoding="utf-8")

"""Train ``lowbit-tiny``: a BPE tokenizer and a small Llama on Python's documentation.

``lowbit model train`` calls :func:`train`. Everything is seeded, single-threaded
by default (the machine is shared) and written in Hugging Face format, with a
checkpoint every ``save_every`` steps so a long run can be inspected while it goes.
"""

from __future__ import annotations

import json
import math
import os
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from labs.lm import corpus

EOS = "<|endoftext|>"
MODEL_DIR = Path(__file__).resolve().parent / "lowbit-tiny"


@dataclass(frozen=True)
class TrainConfig:
    """Hyper-parameters of the shipped model. Widths are multiples of 256 (every format applies)."""

    vocab_size: int = 4096
    hidden_size: int = 256
    intermediate_size: int = 768
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    context: int = 256  # training window, tokens
    max_position_embeddings: int = 1024
    batch_size: int = 16  # windows per step
    steps: int = 700
    lr: float = 1.5e-3  # peak AdamW learning rate
    min_lr: float = 1.5e-4  # end of the cosine schedule
    warmup_steps: int = 50
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    seed: int = 0
    threads: int = 1
    save_every: int = 100
    log_every: int = 20
    extra: dict[str, Any] = field(default_factory=dict)


def build_tokenizer(texts: list[str], vocab_size: int) -> Any:
    """A byte-level BPE (GPT-2 style) trained on ``texts`` only; ``<|endoftext|>`` is id 0."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def encode_stream(tok: Any, texts: list[str]) -> list[int]:
    """All documents' ids, each followed by the end-of-text id."""
    eos = tok.token_to_id(EOS)
    ids: list[int] = []
    for enc in tok.encode_batch(texts, add_special_tokens=False):
        ids.extend(enc.ids)
        ids.append(eos)
    return ids


def llama_config(cfg: TrainConfig, eos_id: int) -> Any:
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=cfg.vocab_size,
        hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size,
        num_hidden_layers=cfg.num_hidden_layers,
        num_attention_heads=cfg.num_attention_heads,
        num_key_value_heads=cfg.num_key_value_heads,
        max_position_embeddings=cfg.max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=False,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
    )


def lr_at(cfg: TrainConfig, step: int) -> float:
    """Linear warm-up, then cosine decay from ``lr`` to ``min_lr``."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    t = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * min(1.0, t)))


def _save(model: Any, tok: Any, out: Path, heldout: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    tok.save(str(out / "tokenizer.json"))
    (out / "heldout.txt").write_text(heldout, encoding="utf-8")
    # safetensors writes 0600; the lab sandbox reads the weights as an unprivileged user.
    (out / "model.safetensors").chmod(0o644)


def write_texts(out: Path, tok: Any, split: corpus.Split) -> dict[str, int]:
    """Write ``heldout.txt``, ``calibration.txt`` and ``lowbit.json`` (their token counts,
    which the labs' parameter validation reads without a tokenizer)."""
    from labs.lm.spec import META_FILE

    texts = {"heldout": corpus.heldout_text(split), "calibration": corpus.calibration_text(split)}
    meta = {}
    for name, text in texts.items():
        (out / f"{name}.txt").write_text(text, encoding="utf-8")
        meta[f"{name}_tokens"] = len(tok.encode(text, add_special_tokens=False).ids)
    (out / META_FILE).write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    return meta


def train(
    out: Path = MODEL_DIR,
    cfg: TrainConfig | None = None,
    corpus_dir: str | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Train from scratch and write the model directory; returns the figures of the model card."""
    import torch

    cfg = cfg or TrainConfig()
    os.environ.setdefault("RAYON_NUM_THREADS", str(cfg.threads))
    torch.set_num_threads(cfg.threads)
    random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    t0 = time.time()
    split = corpus.load_split(corpus_dir)
    heldout = corpus.heldout_text(split)
    log(f"corpus: {len(split.train)} train documents, {len(split.heldout)} held out")
    tok = build_tokenizer(split.train, cfg.vocab_size)
    data = torch.tensor(encode_stream(tok, split.train), dtype=torch.long)
    log(f"tokenizer: {tok.get_vocab_size()} ids; train stream {data.numel()} tokens")

    from transformers import LlamaForCausalLM

    model = LlamaForCausalLM(llama_config(cfg, tok.token_to_id(EOS)))
    n_params = sum(p.numel() for p in model.parameters())
    log(f"model: {n_params / 1e6:.2f} M parameters")
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": cfg.weight_decay},
            {"params": no_decay, "weight_decay": 0},
        ],
        lr=cfg.lr,
        betas=(0.9, 0.95),
    )
    gen = torch.Generator().manual_seed(cfg.seed)
    n_starts = data.numel() - cfg.context
    model.train()
    t_train = time.time()
    loss_avg = 0.0
    for step in range(cfg.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(cfg, step)
        starts = torch.randint(0, n_starts, (cfg.batch_size,), generator=gen)
        x = torch.stack([data[s : s + cfg.context] for s in starts.tolist()])
        loss = model(input_ids=x, labels=x).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        lv = float(loss.detach())
        loss_avg = 0.98 * loss_avg + 0.02 * lv if step else lv
        if step % cfg.log_every == 0 or step == cfg.steps - 1:
            el = time.time() - t_train
            log(
                f"step {step}/{cfg.steps} loss {lv:.3f} avg {loss_avg:.3f} "
                f"lr {lr_at(cfg, step):.2e} {el:.0f}s"
            )
        if (step + 1) % cfg.save_every == 0 and step + 1 < cfg.steps:
            _save(model, tok, out, heldout)
            log(f"checkpoint at step {step + 1}")
    train_s = time.time() - t_train
    _save(model, tok, out, heldout)
    return finish(out, model, tok, split, data, cfg, cfg.steps, train_s, time.time() - t0, log)


def finish(
    out: Path,
    model: Any,
    tok: Any,
    split: corpus.Split,
    data: Any,
    cfg: TrainConfig,
    steps: int,
    train_s: float,
    total_s: float,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Measure the trained model and write ``training.json``, the texts and the model card."""
    from labs.lm import card
    from labs.lm.evaluate import perplexity, windows

    model.eval()
    write_texts(out, tok, split)
    heldout = corpus.heldout_text(split)
    held_ids = tok.encode(heldout, add_special_tokens=False).ids
    w_held = windows(held_ids, cfg.context)
    w_train = windows(data[: w_held.numel()], cfg.context)
    figures = {
        "params": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "tokens_seen": steps * cfg.batch_size * cfg.context,
        "train_stream_tokens": int(data.numel()),
        "train_documents": len(split.train),
        "heldout_documents": split.heldout_names,
        "heldout_tokens": len(held_ids),
        "train_seconds": round(train_s, 1),
        "total_seconds": round(total_s, 1),
        "train_perplexity": perplexity(model, w_train),
        "heldout_perplexity": perplexity(model, w_held),
        "eval_windows": int(w_held.shape[0]),
        "config": {k: v for k, v in asdict(cfg).items() if k != "extra"},
        "sample": card.greedy_sample(model, tok),
        "quantization": card.measure_quantization(model, tok, heldout, cfg.context),
    }
    (out / "training.json").write_text(json.dumps(figures, indent=2) + "\n", encoding="utf-8")
    card.write(out, figures)
    log(
        f"done: train ppl {figures['train_perplexity']:.2f}, "
        f"held-out ppl {figures['heldout_perplexity']:.2f}, {train_s / 60:.1f} min"
    )
    return figures


def finish_checkpoint(
    out: Path,
    steps: int,
    train_s: float,
    cfg: TrainConfig | None = None,
    corpus_dir: str | None = None,
) -> dict[str, Any]:
    """Measure a checkpoint already in ``out`` (a run stopped after ``steps`` steps) and
    write its model card, as :func:`train` does at its end."""
    import torch
    from tokenizers import Tokenizer
    from transformers import LlamaForCausalLM

    cfg = cfg or TrainConfig()
    torch.set_num_threads(cfg.threads)
    split = corpus.load_split(corpus_dir)
    tok = Tokenizer.from_file(str(out / "tokenizer.json"))
    data = torch.tensor(encode_stream(tok, split.train), dtype=torch.long)
    model = LlamaForCausalLM.from_pretrained(out, dtype=torch.float32)
    return finish(out, model, tok, split, data, cfg, steps, train_s, train_s)

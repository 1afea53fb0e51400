"""What every model lab shares: shared parameters, loading, the reference evaluation.

A lab opens an :class:`Evaluation` (the model, the held-out windows and the
reference model's float32 log-probabilities on them, kept in memory up to a budget
and recomputed beyond it), changes weights or the KV cache, and scores the changed
model against the reference.
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from labs.base import Context, LabParams
from labs.catalog.formats import QuantFormatKey
from labs.catalog.models import ModelConfig
from labs.lm import models, spec

MIN_CONTEXT = 16
MAX_CONTEXT = 2048
MAX_EVAL_TOKENS = 131_072
BATCH_TOKENS = 2048  # tokens per forward pass (windows × context)


def field_error(model: object, field: str, message: str) -> ValidationError:
    """A ValidationError located at ``field``, for checks that span several fields, so the
    form shows the message beside the field to change."""
    return ValidationError.from_exception_data(
        type(model).__name__,
        [
            InitErrorDetails(
                type=PydanticCustomError("value_error", "{message}", {"message": message}),
                loc=(field,),
                input=getattr(model, field, None),
            )
        ],
    )


def model_choices() -> list[str]:
    try:
        return list(models.available())
    except OSError:
        return [models.SHIPPED]


def eval_tokens_field(default: int) -> Any:
    """The held-out tokens a model lab evaluates: the same bounds and words for every
    lab, the default its own (the lighter labs evaluate fewer by default)."""
    return Field(
        default=default,
        ge=MIN_CONTEXT,
        le=MAX_EVAL_TOKENS,
        title="Tokens evaluated",
        description="Held-out tokens evaluated (the first ones of the held-out text)",
    )


class ModelParams(LabParams):
    """Parameters every model lab has: which model, how many held-out tokens, window size."""

    model: str = Field(
        default=models.SHIPPED,
        description="The model: lowbit-tiny (shipped with lowbit) or another checkpoint "
        "this server offers",
        json_schema_extra={"enum": list[Any](model_choices())},
    )
    eval_tokens: int = eval_tokens_field(2048)
    context: int = Field(
        default=256,
        ge=MIN_CONTEXT,
        le=MAX_CONTEXT,
        title="Window length",
        description="Tokens per window; tokens 2..n of each window are predicted",
    )

    @model_validator(mode="after")
    def _check_model(self) -> ModelParams:
        try:
            s = self.model_spec()
        except ValueError as e:
            raise field_error(self, "model", str(e)) from None
        try:
            self._check_tokens(s)
        except ValueError as e:
            raise field_error(self, "eval_tokens", str(e)) from None
        return self

    def _check_tokens(self, s: ModelConfig) -> None:
        if self.eval_tokens < self.context:
            raise ValueError(
                f"eval_tokens ({self.eval_tokens}) must hold at least one window of "
                f"context ({self.context}) tokens"
            )
        if s.heldout_tokens is not None and self.eval_tokens > s.heldout_tokens:
            raise ValueError(
                f"eval_tokens ({self.eval_tokens}) is beyond the {s.heldout_tokens} tokens "
                f"of {self.model}'s heldout.txt"
            )

    def model_spec(self) -> ModelConfig:
        try:
            return spec.load_spec(self.model)
        except models.ModelError as e:
            raise ValueError(str(e)) from e


Tensors = Literal["all", "attention", "mlp"]


class WeightParams(ModelParams):
    """Which weights are quantized, and to what (model-quality, tensor-sensitivity and quant-algorithms share them)."""

    format: QuantFormatKey = Field(default="q4_0", description="The weights' format")
    granularity: spec.Granularity = Field(
        default="default",
        description="For int8/int4/fp8: tensor, channel or a block size (e.g. 128); "
        "default keeps the format's own",
    )
    tensors: Tensors = Field(
        default="all",
        title="Which weights",
        description="Which decoder linear layers: all, attention or mlp",
    )

    @model_validator(mode="after")
    def _check_format(self) -> WeightParams:
        where = "format" if self.granularity == "default" else "granularity"
        if isinstance(self.granularity, int) and self.granularity < 1:
            raise field_error(self, where, "granularity as a block size must be at least 1")
        try:
            spec.format_options(self.format, self.granularity)  # raises for a bad pair
        except ValueError as e:
            raise field_error(self, where, str(e)) from None
        s = self.model_spec()
        problem = spec.block_problem(
            s,
            s.linear_names(self.tensors),
            self.format,
            spec.block_of(self.format, self.granularity),
        )
        if problem:
            raise field_error(self, where, problem)
        return self


@dataclass
class Evaluation:
    loaded: models.Loaded
    spec: ModelConfig
    windows: Any  # [n, context] int64
    reference: Any  # reference.ReferenceLogits: kept within a budget, recomputed beyond
    base: Any  # evaluate.Totals of the unchanged model
    batch_size: int
    device: str
    seconds: float

    @property
    def model(self) -> Any:
        return self.loaded.model


def token_ids(loaded: models.Loaded, filename: str) -> list[int]:
    """``filename``'s text encoded with the model's tokenizer, no special tokens."""
    return list(_encoded(loaded.path / "tokenizer.json", models.text_file(loaded.path, filename)))


def _encoded(tokenizer_file: Path, text_file: Path) -> tuple[int, ...]:
    # Encoding heldout.txt and calibration.txt took 0.66 s of every quant-algorithms
    # run; the fork server encodes the shipped model's once (warm_token_ids) and each
    # run's child inherits the result. The files' size and mtime are in the key.
    def stamp(p: Path) -> tuple[str, int, int]:
        st = p.stat()
        return str(p), st.st_size, st.st_mtime_ns

    return _encode(stamp(tokenizer_file), stamp(text_file))


@functools.lru_cache(maxsize=8)
def _encode(
    tokenizer_file: tuple[str, int, int], text_file: tuple[str, int, int]
) -> tuple[int, ...]:
    from tokenizers import Tokenizer

    tok = Tokenizer.from_file(tokenizer_file[0])
    text = Path(text_file[0]).read_text(encoding="utf-8")
    return tuple(tok.encode(text, add_special_tokens=False).ids)


def warm_token_ids() -> None:
    """Encode the shipped model's held-out and calibration texts into the cache (for the
    fork server's preload: tokenizers starts no thread for one ``encode``)."""
    d = models.SHIPPED_DIR
    for name in (models.HELDOUT_FILE, models.CALIBRATION_FILE):
        _encoded(d / "tokenizer.json", d / name)


def open_evaluation(
    params: ModelParams, ctx: Context, start: float = 0.0, span: float = 0.3
) -> Evaluation:
    """Load the model, cut the held-out windows and evaluate the reference model.
    Progress goes from ``start`` to ``start + span``."""
    import torch

    from labs.lm.evaluate import evaluate, windows

    t0 = time.perf_counter()
    ctx.progress(start, f"loading {params.model}")
    loaded = models.load(params.model, ctx.device)
    ids = token_ids(loaded, models.HELDOUT_FILE)
    if params.eval_tokens > len(ids):
        raise ValueError(
            f"eval_tokens ({params.eval_tokens}) is beyond the {len(ids)} tokens of heldout.txt"
        )
    w = windows(ids[: params.eval_tokens], params.context)
    bs = max(1, BATCH_TOKENS // params.context)
    ctx.log(
        f"{params.model}: {sum(p.numel() for p in loaded.model.parameters()):,} parameters "
        f"({str(loaded.dtype).removeprefix('torch.')}) on {ctx.device}; {w.shape[0]} windows of "
        f"{params.context} tokens"
    )

    def step(done: int, total: int) -> None:
        ctx.progress(start + span * done / total, "reference model")

    torch.manual_seed(0)
    base, ref = evaluate(
        loaded.model, w, batch_size=bs, device=ctx.device, keep_reference=True, on_batch=step
    )
    return Evaluation(
        loaded, params.model_spec(), w, ref, base, bs, ctx.device, time.perf_counter() - t0
    )


def score(
    ev: Evaluation,
    ctx: Context | None = None,
    start: float = 0.0,
    span: float = 0.0,
    message: str = "",
) -> Any:
    """Totals of the model as it is now against the reference logits."""
    from labs.lm.evaluate import evaluate

    def step(done: int, total: int) -> None:
        if ctx is not None and span:
            ctx.progress(start + span * done / total, message)

    tot, _ = evaluate(
        ev.model,
        ev.windows,
        reference=ev.reference,
        batch_size=ev.batch_size,
        device=ev.device,
        on_batch=step,
    )
    return tot


def quality(tot: Any, base: Any) -> dict[str, float]:
    """The contract's figures for one evaluated model (``base``: the reference's totals)."""
    return {
        "perplexity": tot.perplexity(),
        "perplexity_delta": tot.perplexity() - base.perplexity(),
        "kl_divergence": tot.kl_divergence(),
        "top1_agreement": tot.top1_agreement(),
    }

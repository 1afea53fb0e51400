"""tensor-sensitivity's parameters and result (no torch)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

from labs.base import LabResult
from labs.catalog.formats import QUANT_BLOCK_SIZES, QuantFormatKey
from labs.lm import spec
from labs.lm.session import WeightParams, eval_tokens_field, field_error

Unit = Literal["tensor", "kind", "layer"]


MAX_UNIFORM = 6


class TensorSensitivityParams(WeightParams):
    format: QuantFormatKey = Field(default="int4", description="The format each unit is tested in")
    granularity: spec.Granularity = Field(
        default="channel",
        description="For int8/int4/fp8: tensor, channel or a block size; default: the format's own",
    )
    eval_tokens: int = eval_tokens_field(1024)
    unit: Unit = Field(
        default="kind",
        description="What is quantized at a time: one tensor, one kind (q_proj … down_proj) "
        "in every layer, or one whole layer",
    )
    high_format: QuantFormatKey = Field(
        default="q8_0",
        title="Format of the most sensitive",
        description="Format of the top_k most sensitive units in the mixed recipe",
    )
    top_k: int = Field(
        default=2, ge=0, le=64, title="Units given more bits", description="Units in high_format"
    )
    uniform: list[QuantFormatKey] = Field(
        default_factory=list,
        max_length=MAX_UNIFORM,
        title="More uniform formats",
        description="Uniform formats drawn beside the mixed recipe, its base (every weight "
        "in format) and uniform high_format, which are always drawn",
    )

    @model_validator(mode="after")
    def _check_high(self) -> TensorSensitivityParams:
        s = self.model_spec()
        names = s.linear_names(self.tensors)
        for where, f in [("high_format", self.high_format)] + [
            ("uniform", u) for u in self.uniform
        ]:
            problem = spec.block_problem(s, names, f, QUANT_BLOCK_SIZES[f])
            if problem:
                raise field_error(self, where, problem)
        return self


class Ranked(BaseModel):
    unit: str
    tensors: int
    kl_divergence: float = Field(
        description="Mean KL(p_ref ‖ p_q) in nats with only this unit quantized"
    )
    perplexity_delta: float
    top1_agreement: float
    sqnr_db: float | None = Field(description="SQNR of the unit's weights taken together")
    kl_interval: list[float] = Field(default_factory=list, description="95 % over windows")


class Point(BaseModel):
    label: str
    bits_per_weight: float
    weight_bytes: int
    kl_divergence: float
    perplexity: float


class TensorSensitivityResult(LabResult):
    model: str
    format: str
    unit: str
    device: str
    eval_tokens: int
    baseline_perplexity: float
    ranking: list[Ranked]
    most_sensitive_kind: str | None = Field(description="With unit kind: the top of the ranking")
    most_sensitive_ties: list[str] = Field(
        description="Units whose KL a paired comparison cannot tell from the top's"
    )
    mixed: Point
    base: Point = Field(description="Every weight in format: the mixed recipe's own base")
    high_format: str
    recipe: dict[str, str] = Field(description="Unit -> format in the mixed recipe")
    uniform: list[Point] = Field(description="Uniform high_format, then the extra formats")
    mixed_worth_its_bits: bool = Field(
        description="The mix lies below the straight line from its base to uniform high_format"
    )
    finding: str
    seconds: float

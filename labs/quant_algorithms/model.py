"""quant-algorithms' parameters and result (no torch); what the lab compares is in the
package's docstring (``labs.quant_algorithms``)."""

from __future__ import annotations

from typing import Any, Literal, get_args

from pydantic import BaseModel, Field, model_validator

from labs.base import LabResult
from labs.catalog.formats import QuantFormatKey
from labs.lm.session import WeightParams, eval_tokens_field, field_error

Method = Literal["rtn", "gptq", "awq"]
# AWQ's scale groups: linears that read the same input share one scale, which a real
# checkpoint folds into the op that produced that input.
AWQ_GROUPS = (
    ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"),  # input_layernorm
    ("self_attn.o_proj",),  # v_proj (only when widths match, i.e. no GQA)
    ("mlp.gate_proj", "mlp.up_proj"),  # post_attention_layernorm
    ("mlp.down_proj",),  # up_proj
)


class QuantAlgorithmsParams(WeightParams):
    format: QuantFormatKey = Field(default="int4", description="The format every method produces")
    eval_tokens: int = eval_tokens_field(1024)
    methods: list[Method] = Field(
        default_factory=lambda: list(get_args(Method)),
        min_length=1,
        max_length=3,
        description="Which of rtn (round-to-nearest), gptq and awq to run",
    )
    calibration_tokens: int = Field(
        default=1024,
        ge=16,
        le=65_536,
        title="Calibration tokens",
        description="Tokens of calibration text (from the training split) GPTQ and AWQ see",
    )
    damp: float = Field(
        default=0.01,
        gt=0,
        le=1,
        title="GPTQ damping",
        description="Added to the diagonal of GPTQ's Hessian, as a share of its mean",
    )
    act_order: bool = Field(
        default=False,
        title="GPTQ activation order",
        description="GPTQ visits columns with the largest input activations first",
    )

    @model_validator(mode="after")
    def _check_calibration(self) -> QuantAlgorithmsParams:
        if len(set(self.methods)) != len(self.methods):
            raise field_error(self, "methods", "each method at most once")
        s = self.model_spec()
        if self.calibration_tokens < self.context:
            raise field_error(
                self,
                "calibration_tokens",
                f"calibration_tokens ({self.calibration_tokens}) must hold one window of "
                f"context ({self.context})",
            )
        if s.calibration_tokens is not None and self.calibration_tokens > s.calibration_tokens:
            raise field_error(
                self,
                "calibration_tokens",
                f"calibration_tokens ({self.calibration_tokens}) is beyond the "
                f"{s.calibration_tokens} tokens of calibration.txt",
            )
        return self


class Quality(BaseModel):
    kl_divergence: float
    kl_divergence_interval: list[float] = Field(default_factory=list, description="95 %")
    perplexity: float
    perplexity_interval: list[float] = Field(default_factory=list)
    top1_agreement: float
    top1_agreement_interval: list[float] = Field(default_factory=list)

    @classmethod
    def of(cls, tot: Any) -> Quality:
        """The figures of one evaluation (``labs.lm.evaluate.Totals``) with intervals."""
        return cls(
            kl_divergence=tot.kl_divergence(),
            kl_divergence_interval=tot.kl_ci().as_list(),
            perplexity=tot.perplexity(),
            perplexity_interval=list(tot.perplexity_interval()),
            top1_agreement=tot.top1_agreement(),
            top1_agreement_interval=tot.top1_ci().as_list(),
        )


class MethodResult(BaseModel):
    calibration: Quality
    heldout: Quality
    vs_rtn: dict[str, float | int | bool] | None = Field(
        default=None, description="Paired difference of held-out KL per window, method − RTN"
    )
    weight_bytes: int
    bits_per_weight: float
    seconds: float = Field(description="Time to quantize, calibration included")
    detail: dict[str, float] = Field(default_factory=dict)


class QuantAlgorithmsResult(LabResult):
    model: str
    format: str
    device: str
    eval_tokens: int
    calibration_tokens: int
    baseline_perplexity: float
    baseline_calibration_perplexity: float
    methods: dict[str, MethodResult]
    best_method: str = Field(description="The method with the lowest held-out KL")
    best_method_ties: list[str] = Field(
        description="Methods whose held-out KL a paired comparison cannot tell from the best's"
    )
    outliers: dict[str, Any] | None = Field(
        description="The calibration activations' most unequal input channel (AWQ's statistic)"
    )
    finding: str
    seconds: float

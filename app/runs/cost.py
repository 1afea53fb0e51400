"""How long a run will take, estimated from its parameters before it is queued.

The estimate decides a run's lane (short runs never wait behind long ones), its
place among the queued runs, and what the lab form and the queue say ("about
2 min on this server"). It is arithmetic on the parameters, no torch: the web
process computes it.

The model labs' cost is counted in forward passes of their model over tokens,
each token costing in proportion to the multiply-adds of one decoder step (the
linear layers, the head and attention over the window); GPTQ and AWQ add
passes over the calibration text and work per linear layer. The coefficients
were fitted to the CPU seconds of runs through a real worker on one torch
thread; a model lab now runs on every core of its run (``Lab.wide_ops``), 1.2-1.8x
faster on two, so for it the estimate is the slow end of the wait. ``benchmarks/cost_model.py``
measures them again and prints estimate against measurement, and
``tests/integration/test_fairness.py`` keeps each model lab's default and a
larger run within a factor of two.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from labs.catalog.models import ModelConfig
from labs.lm import models
from labs.lm import spec as lm_spec

# Fitted to CPU seconds of runs through a real worker (benchmarks/cost_model.py) and of
# the same labs in a fresh process (for the GPTQ and AWQ terms), on this server.
# Forking the child, its sandbox and what it imports beyond the warm parent (seconds).
RUN_OVERHEAD_S = 0.2
# A model-lab child loads its model and tokenizer and warms the first call (seconds,
# for the shipped model; scaled by the model's size for others).
MODEL_LOAD_S = 0.6
# Seconds per multiply-add of a forward pass, one torch thread: 0.137 ms per token of
# the shipped model in a 256-token window.
SECONDS_PER_MAC = 3.1e-11
# Calibration works on the linear layers' inputs and outputs, so its cost per token
# is counted in passes through the linear weights alone (no head, no attention: it
# does not grow with the window; fitted at 256 and checked at 2048 tokens).
# GPTQ: the layer inputs and the Hessian updates per calibration token, then the
# column-by-column solve of each linear layer (seconds per input column);
# act_order visits columns in a permuted order.
GPTQ_PASSES_PER_TOKEN = 3.1
GPTQ_SOLVE_S_PER_COLUMN = 1.2e-4
ACT_ORDER_FACTOR = 1.45
# AWQ: a grid of scales per layer, each scored by the layer's output over the
# calibration activations: passes' worth per calibration token, plus a fixed part.
AWQ_PASSES_PER_TOKEN = 14.0  # 21 before its scale trials stacked shared-input linears
AWQ_FIXED_S = 1.0
# Quantizing the model's linear weights once (seconds per weight).
QUANTIZE_S_PER_WEIGHT = 1.0e-8
# A block-quantize of one element, and its four figures, written as SVG without
# matplotlib since issue 20 (labs.viz.svgplot: 0.3 s before) (seconds).
ELEMENT_S = 2.0e-8
DRAW_S = 0.03
# Labs without a model of their own: tables, arithmetic and a figure or two.
DEFAULT_S = 0.5


def _spec(params: Mapping[str, Any]) -> ModelConfig | None:
    try:
        return lm_spec.load_spec(str(params.get("model") or models.SHIPPED))
    except Exception:  # an unknown model is refused by validation; estimate it as shipped
        return None


def _shipped() -> ModelConfig:
    return lm_spec.load_spec(models.SHIPPED)


def _linear_weights(s: ModelConfig, tensors: str = "all") -> int:
    return sum(s.out_width(n) * s.in_width(n) for n in s.linear_names(tensors))


def _token_macs(s: ModelConfig, context: int) -> float:
    """Multiply-adds of one token's forward pass in a window of ``context`` tokens:
    the linear layers, the head, and attention over half the window on average."""
    attention = s.num_layers * s.q_dim * context  # q·k and p·v over context/2 each
    return _linear_weights(s) + s.hidden_size * s.vocab_size + attention


def _passes_s(s: ModelConfig, tokens: int, context: int, passes: float) -> float:
    return passes * tokens * _token_macs(s, context) * SECONDS_PER_MAC


def _calibration_s(s: ModelConfig, tokens: int, passes: float) -> float:
    return passes * tokens * _linear_weights(s) * SECONDS_PER_MAC


def _load_s(s: ModelConfig) -> float:
    return MODEL_LOAD_S * max(1.0, _linear_weights(s) / _linear_weights(_shipped()))


def _window(p: Mapping[str, Any], key: str = "eval_tokens", default: int = 2048) -> tuple[int, int]:
    return int(p.get(key) or default), int(p.get("context") or 256)


def model_quality(p: Mapping[str, Any]) -> float:
    s = _spec(p) or _shipped()
    tokens, context = _window(p)
    quantize = _linear_weights(s, str(p.get("tensors") or "all")) * QUANTIZE_S_PER_WEIGHT
    return _load_s(s) + _passes_s(s, tokens, context, 2) + quantize


def kv_quant(p: Mapping[str, Any]) -> float:
    s = _spec(p) or _shipped()
    tokens, context = _window(p)
    return _load_s(s) + _passes_s(s, tokens, context, 2)


def tensor_sensitivity(p: Mapping[str, Any]) -> float:
    """One reference pass, one per unit quantized alone, one per uniform format and
    one for the mixed recipe."""
    s = _spec(p) or _shipped()
    tokens, context = _window(p, default=1024)
    tensors = str(p.get("tensors") or "all")
    unit = str(p.get("unit") or "kind")
    names = s.linear_names(tensors)
    units = {"tensor": len(names), "layer": s.num_layers}.get(
        unit, len(names) // max(1, s.num_layers)
    )
    uniform = p.get("uniform")
    n_uniform = len(uniform) if isinstance(uniform, list) else 3
    passes = 1 + units + n_uniform + 1
    quantize = (units + n_uniform + 1) * _linear_weights(s, tensors) * QUANTIZE_S_PER_WEIGHT
    return _load_s(s) + _passes_s(s, tokens, context, passes) + quantize


def quant_algorithms(p: Mapping[str, Any]) -> float:
    """A reference pass and one per method over the evaluation text, plus each
    method's calibration."""
    s = _spec(p) or _shipped()
    tokens, context = _window(p, default=1024)
    calibration = int(p.get("calibration_tokens") or 1024)
    methods = p.get("methods")
    methods = methods if isinstance(methods, list) else ["rtn", "gptq", "awq"]
    total = _load_s(s) + _passes_s(s, tokens, context, 1 + len(methods))
    columns = sum(s.in_width(n) for n in s.linear_names(str(p.get("tensors") or "all")))
    if "gptq" in methods:
        gptq = _calibration_s(s, calibration, GPTQ_PASSES_PER_TOKEN)
        gptq += columns * GPTQ_SOLVE_S_PER_COLUMN
        total += gptq * (ACT_ORDER_FACTOR if p.get("act_order") else 1.0)
    if "awq" in methods:
        total += AWQ_FIXED_S + _calibration_s(s, calibration, AWQ_PASSES_PER_TOKEN)
    return total


def block_quantize(p: Mapping[str, Any]) -> float:
    shape = p.get("shape")
    values = p.get("values")
    if isinstance(shape, list) and len(shape) == 2 and all(isinstance(x, int) for x in shape):
        elements = shape[0] * shape[1]
    elif isinstance(values, list):
        elements = len(values)
    else:
        elements = 256 * 256
    return DRAW_S + elements * ELEMENT_S


def probe(p: Mapping[str, Any]) -> float:
    """The sandbox probes of the tests: ``sleep`` sleeps ``seconds``."""
    return float(p.get("seconds") or 0.0) if p.get("mode") == "sleep" else 0.0


MODELS: dict[str, Callable[[Mapping[str, Any]], float]] = {
    "model-quality": model_quality,
    "kv-quant": kv_quant,
    "tensor-sensitivity": tensor_sensitivity,
    "quant-algorithms": quant_algorithms,
    "block-quantize": block_quantize,
    "sandbox-probe": probe,
    "sandbox-probe-slow": probe,
}


def estimate_seconds(lab_id: str, params: Mapping[str, Any]) -> float:
    """Seconds a run of ``lab_id`` with these (validated, JSON) parameters should take
    on one torch thread, from its start in the worker to its result."""
    model = MODELS.get(lab_id)
    return RUN_OVERHEAD_S + (model(params) if model else DEFAULT_S)


def ordinal(n: int | None) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 21st."""
    if n is None:
        return ""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def about(seconds: float) -> str:
    """A wait or a duration as a person says it: "about 40 s", "about 2 min"."""
    if seconds < 1.5:
        return "about a second"
    if seconds < 10:
        return f"about {round(seconds)} s"
    if seconds < 60:
        return f"about {round(seconds / 5) * 5} s"
    if seconds < 90:
        return "about a minute"
    if seconds < 3600:
        return f"about {round(seconds / 60)} min"
    return f"about {seconds / 3600:.1f} h"

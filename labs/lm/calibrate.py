"""Calibration for GPTQ and AWQ: the inputs of each decoder layer's linears.

GPTQ calibrates layers in order (``sequential``), as its reference does: layer
``i``'s inputs are captured with layers ``0..i-1`` already quantized, so later
layers correct for the error earlier ones left. Each batch's hidden state is kept
between layers; ``layer_inputs`` (a forward pass stopped at the end of layer ``i``)
gives the same numbers and is what the tests compare it with.

AWQ's reference (llm-awq ``run_awq``, AutoAWQ) searches every layer on the
unquantized model's activations: scaling is exact in full precision, and each
layer's output is computed before its weights change. So ``captured_inputs``
keeps them from a forward pass the run makes anyway (the calibration text's
reference pass), with no pass of its own.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import torch


class _Stop(Exception):
    """Raised by a hook to end a forward pass once the layer of interest has run."""


def layer_inputs(
    model: Any, layer: int, names: list[str], windows: torch.Tensor, batch_size: int, device: str
) -> dict[str, torch.Tensor]:
    """Inputs ``[tokens, in]`` (float32, on the CPU) of each linear ``names`` in ``layer``
    (``captured_inputs`` of a forward pass stopped at the end of ``layer``); linears fed
    the same input (q/k/v, gate/up) share one tensor. Batches run on the run's cores."""

    def stop(*_: Any) -> None:
        raise _Stop

    hook = model.model.layers[layer].register_forward_hook(stop)
    try:
        with captured_inputs(model, names, windows.shape[1]) as got:
            _forward_until_stopped(model, windows, batch_size, device)
    finally:
        hook.remove()
    return got


def _forward_until_stopped(model: Any, windows: torch.Tensor, batch_size: int, device: str) -> None:
    """A forward pass of every batch of ``windows`` (marked, on the run's cores) that a
    hook ends by raising ``_Stop``."""
    from labs.lm.batches import batch_starts, marked_batch, run_batches

    def work(first: int) -> None:
        try:
            with torch.no_grad(), marked_batch(first):
                model(input_ids=windows[first : first + batch_size].to(device), use_cache=False)
        except _Stop:
            pass

    run_batches(work, batch_starts(windows.shape[0], batch_size), device)


def by_layer(names: list[str]) -> dict[int, list[str]]:
    """``model.layers.{i}.…`` names grouped by layer index, in order."""
    out: dict[int, list[str]] = {}
    for n in names:
        out.setdefault(int(n.split(".")[2]), []).append(n)
    return dict(sorted(out.items()))


def _first_layer_arguments(
    model: Any, windows: torch.Tensor, batch_size: int, device: str
) -> dict[int, tuple[torch.Tensor, dict[str, Any]]]:
    """For each batch (by its first window): the first decoder layer's input and the
    keyword arguments the model gives every layer (rotary embeddings, mask, positions),
    from a forward pass stopped there."""
    from labs.lm.batches import current_batch

    got: dict[int, tuple[torch.Tensor, dict[str, Any]]] = {}

    def grab(_m: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        got[current_batch()] = (args[0], dict(kwargs))
        raise _Stop

    hook = model.model.layers[0].register_forward_pre_hook(grab, with_kwargs=True)
    try:
        _forward_until_stopped(model, windows, batch_size, device)
    finally:
        hook.remove()
    return got


def sequential(
    model: Any,
    names: list[str],
    windows: torch.Tensor,
    batch_size: int,
    device: str,
    quantize_layer: Callable[[int, dict[str, torch.Tensor]], None],
    on_layer: Callable[[int, int], None] | None = None,
) -> None:
    """For each layer in order: capture its linears' inputs, then ``quantize_layer`` it.

    As the reference implementation, each batch's hidden state is kept between layers:
    a layer runs once to capture its inputs and once, quantized, to make the next
    layer's input, instead of a forward pass from the embeddings per layer (10 layer
    runs of a 4-layer model become 7, and the count grows with the layers, not their
    square). The same numbers as ``layer_inputs`` with the layers before quantized: the
    same layers on the same batches with the arguments the model passes them."""
    from labs.lm.batches import marked_batch, run_batches

    layers = by_layer(names)
    decoder = model.model.layers
    states = _first_layer_arguments(model, windows, batch_size, device)
    at = 0  # the layer whose input ``states`` holds

    def run(layer: int, keep: bool) -> None:
        def work(first: int) -> tuple[int, torch.Tensor]:
            h, kwargs = states[first]
            with torch.no_grad(), marked_batch(first):
                return first, decoder[layer](h, **kwargs)

        for first, out in run_batches(work, list(states), device):
            if keep:
                states[first] = (out, states[first][1])

    for k, (layer, members) in enumerate(layers.items()):
        for i in range(at, layer):  # layers with nothing to calibrate run as they are
            run(i, keep=True)
        with captured_inputs(model, members, windows.shape[1]) as got:
            run(layer, keep=False)
        quantize_layer(layer, got)
        if k + 1 < len(layers):
            run(layer, keep=True)  # its output with the quantized weights
        at = layer + 1
        if on_layer is not None:
            on_layer(k + 1, len(layers))


@contextmanager
def captured_inputs(
    model: Any, names: list[str], context: int, rows: torch.Tensor | None = None
) -> Iterator[dict[str, torch.Tensor]]:
    """While open, forward passes of ``model`` over windows of ``context`` tokens, in
    batches marked by ``labs.lm.batches.marked_batch`` (``evaluate`` marks its own), keep
    the input of each linear in ``names``: the tokens numbered ``rows`` (sorted, counted
    over every window in order; all tokens if None). On exit the yielded dict holds each
    ``[rows, in]`` (float32, on the CPU), in token order whichever cores ran the batches;
    linears fed the same tensor (q/k/v, gate/up) share one."""
    from labs.lm.batches import current_batch

    got: dict[str, dict[int, torch.Tensor]] = {n: {} for n in names}
    hooks = []
    for n in names:

        def pre(_m: Any, args: tuple[Any, ...], n: str = n) -> None:
            x = args[0].detach()
            first = current_batch()
            flat = x.reshape(-1, x.shape[-1])
            if rows is not None:
                lo = first * context
                lo_i, hi_i = torch.searchsorted(rows, torch.tensor([lo, lo + flat.shape[0]]))
                flat = flat[rows[lo_i:hi_i] - lo]
            got[n][first] = flat.float().cpu()

        hooks.append(model.get_submodule(n).register_forward_pre_hook(pre))
    out: dict[str, torch.Tensor] = {}
    try:
        yield out
    finally:
        for h in hooks:
            h.remove()
    joined: dict[tuple[int, ...], torch.Tensor] = {}  # one tensor for inputs shared by linears
    for n, parts in got.items():
        ordered = [parts[first] for first in sorted(parts)]
        key = tuple(p.data_ptr() for p in ordered)
        if key not in joined:
            joined[key] = torch.cat(ordered)
        out[n] = joined[key]


# The four points where AWQ reads activations in a Llama layer, by the linear they feed.
OUTLIER_POINTS = (
    ("self_attn.q_proj", "attention input"),
    ("self_attn.o_proj", "o_proj input"),
    ("mlp.gate_proj", "MLP input"),
    ("mlp.down_proj", "down_proj input"),
)
TOP_SHARE = 0.01  # "salient" channels: the top 1 %, as in the AWQ paper


@dataclass
class Outliers:
    """How unequal the input channels of one linear are, by AWQ's statistic: the mean
    |x| of each channel over the calibration tokens."""

    layer: int
    point: str
    channels: int
    max_over_median: float  # largest channel's mean |x| over the median channel's
    top_share: float  # share of Σ mean|x| carried by the top 1 % of channels (≥ 1 channel)

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextmanager
def outlier_sums(model: Any) -> Iterator[dict[tuple[int, str], torch.Tensor]]:
    """While open, every forward pass of ``model`` adds each AWQ input point's Σ|x| per
    channel (float64) into the yielded dict, keyed ``(layer, point)``: hooks that let the
    calibration pass a run makes anyway also collect ``activation_outliers``' statistic.
    Forward passes on several threads at once are fine (the additions are locked)."""
    sums: dict[tuple[int, str], torch.Tensor] = {}
    lock = threading.Lock()
    hooks = []
    for i in range(len(model.model.layers)):
        for name, point in OUTLIER_POINTS:
            mod = model.get_submodule(f"model.layers.{i}.{name}")

            def pre(_m: Any, args: tuple[Any, ...], key: tuple[int, str] = (i, point)) -> None:
                x = args[0].detach().float().abs().reshape(-1, args[0].shape[-1]).sum(0).cpu()
                with lock:
                    sums[key] = sums[key] + x.double() if key in sums else x.double()

            hooks.append(mod.register_forward_pre_hook(pre))
    try:
        yield sums
    finally:
        for h in hooks:
            h.remove()


def summarize_outliers(sums: dict[tuple[int, str], torch.Tensor], tokens: int) -> list[Outliers]:
    """``activation_outliers``' statistic from the sums ``outlier_sums`` collected over
    ``tokens`` tokens."""
    out = []
    for (layer, point), total in sorted(sums.items()):
        mean = total / tokens
        top = max(1, round(TOP_SHARE * mean.numel()))
        out.append(
            Outliers(
                layer=layer,
                point=point,
                channels=mean.numel(),
                max_over_median=float(mean.max() / mean.median()),
                top_share=float(mean.topk(top).values.sum() / mean.sum()),
            )
        )
    return out


@torch.no_grad()
def activation_outliers(
    model: Any, windows: torch.Tensor, batch_size: int, device: str
) -> list[Outliers]:
    """Per decoder layer and AWQ input point, the channel statistic AWQ exploits, from
    the unquantized model on ``windows``. Large ``max_over_median`` (tens to hundreds in
    billion-parameter LLMs) is what lets AWQ's scaling protect a few channels cheaply."""
    with outlier_sums(model) as sums:
        for b in range(0, windows.shape[0], batch_size):
            model(input_ids=windows[b : b + batch_size].to(device), use_cache=False)
    return summarize_outliers(sums, windows.numel())

"""Calibration for GPTQ and AWQ: each decoder layer's linear inputs, layer by layer.

Layers are calibrated in order, as GPTQ and AWQ do: layer ``i``'s inputs are
captured with layers ``0..i-1`` already quantized, so later layers learn to
correct for the error earlier ones left. Capturing stops the forward pass at
the end of layer ``i`` (nothing after it is computed).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


class _Stop(Exception):
    """Raised by a hook to end a forward pass once the layer of interest has run."""


def layer_inputs(
    model: Any, layer: int, names: list[str], windows: torch.Tensor, batch_size: int, device: str
) -> dict[str, torch.Tensor]:
    """Inputs ``[tokens, in]`` (float32, on the CPU) of each linear ``names`` in ``layer``."""
    got: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    hooks = []
    for n in names:
        mod = model.get_submodule(n)

        def pre(_m: Any, args: tuple[Any, ...], n: str = n) -> None:
            x = args[0]
            got[n].append(x.detach().reshape(-1, x.shape[-1]).float().cpu())

        hooks.append(mod.register_forward_pre_hook(pre))

    def stop(*_: Any) -> None:
        raise _Stop

    hooks.append(model.model.layers[layer].register_forward_hook(stop))
    try:
        with torch.no_grad():
            for i in range(0, windows.shape[0], batch_size):
                try:
                    model(input_ids=windows[i : i + batch_size].to(device), use_cache=False)
                except _Stop:
                    pass
    finally:
        for h in hooks:
            h.remove()
    return {n: torch.cat(v) for n, v in got.items()}


def by_layer(names: list[str]) -> dict[int, list[str]]:
    """``model.layers.{i}.…`` names grouped by layer index, in order."""
    out: dict[int, list[str]] = {}
    for n in names:
        out.setdefault(int(n.split(".")[2]), []).append(n)
    return dict(sorted(out.items()))


def sequential(
    model: Any,
    names: list[str],
    windows: torch.Tensor,
    batch_size: int,
    device: str,
    quantize_layer: Callable[[int, dict[str, torch.Tensor]], None],
    on_layer: Callable[[int, int], None] | None = None,
) -> None:
    """For each layer in order: capture its linears' inputs, then ``quantize_layer`` it."""
    layers = by_layer(names)
    for k, (layer, members) in enumerate(layers.items()):
        quantize_layer(layer, layer_inputs(model, layer, members, windows, batch_size, device))
        if on_layer is not None:
            on_layer(k + 1, len(layers))

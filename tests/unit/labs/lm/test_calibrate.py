"""Where GPTQ and AWQ read their calibration inputs: GPTQ layer by layer with the layers
before already quantized, AWQ from the unquantized model, kept from the calibration
text's reference pass."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from labs.lm import calibrate, fakequant, models, session
from labs.lm.evaluate import evaluate, windows
from labs.quant.parallel import set_workers
from labs.quant_algorithms import compute
from labs.quant_algorithms.model import QuantAlgorithmsParams

CONTEXT = 128


@pytest.fixture(scope="module")
def cal_w(loaded):
    return windows(session.token_ids(loaded, models.CALIBRATION_FILE)[:1024], CONTEXT)


@pytest.mark.parametrize("workers", [1, 2])
def test_inputs_kept_from_an_evaluation_are_each_layers_inputs(loaded, cal_w, workers) -> None:
    """Every layer's linear inputs, from one full forward pass on any number of cores, in
    token order: the same numbers ``layer_inputs`` gets by stopping at each layer; with
    ``rows``, just those tokens."""
    model = loaded.model
    names = ["model.layers.0.self_attn.q_proj", "model.layers.2.mlp.down_proj"]
    rows = torch.tensor([0, 5, 127, 128, 300, 1023])
    set_workers(workers)
    try:
        with (
            calibrate.captured_inputs(model, names, CONTEXT) as every,
            calibrate.captured_inputs(model, names, CONTEXT, rows) as some,
        ):
            evaluate(model, cal_w, batch_size=2)
    finally:
        set_workers(None)
    for n in names:
        layer = int(n.split(".")[2])
        want = calibrate.layer_inputs(model, layer, [n], cal_w, 2, "cpu")[n]
        assert want.shape == (1024, model.get_submodule(n).in_features)
        assert torch.equal(every[n], want)
        assert torch.equal(some[n], want[rows])


def test_a_forward_pass_outside_a_marked_batch_is_refused(loaded, cal_w) -> None:
    """A hook that cannot tell which tokens it sees raises, rather than file them under
    the last batch this thread ran."""
    model = loaded.model
    with calibrate.captured_inputs(model, ["model.layers.0.mlp.up_proj"], CONTEXT) as got:
        evaluate(model, cal_w[:2], batch_size=2)  # marks, then clears, batch 0
        with pytest.raises(RuntimeError, match="outside a marked batch"):
            model(input_ids=cal_w[:1], use_cache=False)
    assert got["model.layers.0.mlp.up_proj"].shape[0] == 2 * CONTEXT


def test_awq_reads_the_unquantized_models_inputs_and_gptq_the_quantized_ones(
    loaded, cal_w, monkeypatch
) -> None:
    """As the references: AWQ (llm-awq ``run_awq``) computes each layer's inputs before
    any weight changes; GPTQ feeds layer i the output of the quantized layers before it."""
    from labs.quant import awq as awq_mod
    from labs.quant import gptq as gptq_mod

    model = loaded.model
    params = QuantAlgorithmsParams(methods=["awq", "gptq"], context=CONTEXT, format="int4")
    groups = [
        g
        for layer in compute.awq_groups(params.model_spec().linear_names()).values()
        for g in layer
    ]
    names = [n for _, members in groups for n in members]
    points = [members[0] for _, members in groups]
    with calibrate.captured_inputs(model, points, CONTEXT) as fp_inputs:
        evaluate(model, cal_w, batch_size=2)
    fp_last = calibrate.layer_inputs(model, 3, ["model.layers.3.mlp.down_proj"], cal_w, 2, "cpu")
    seen: dict[str, list[torch.Tensor]] = {"awq": [], "gptq": []}
    real_awq, real_hessian = awq_mod.awq, gptq_mod.hessian

    def spy_awq(ws, x, *a, **k):
        seen["awq"].append(x)
        return real_awq(ws, x, *a, **k)

    def spy_hessian(x, *a, **k):
        seen["gptq"].append(x)
        return real_hessian(x, *a, **k)

    monkeypatch.setattr(awq_mod, "awq", spy_awq)
    monkeypatch.setattr(gptq_mod, "hessian", spy_hessian)

    ev = SimpleNamespace(model=model, batch_size=2, device="cpu")  # what _quantize reads
    ctx = SimpleNamespace(progress=lambda *_: None)
    editor = fakequant.WeightEditor(model)
    try:
        for method in ("awq", "gptq"):
            args = (ev, cal_w, fp_inputs, names, params, editor, ctx, (0, 1))
            compute._quantize(method, *args)  # type: ignore[arg-type]
            editor.restore()
    finally:
        editor.restore()
    last_down = fp_last["model.layers.3.mlp.down_proj"]
    assert any(torch.equal(x, last_down) for x in seen["awq"])
    assert len(seen["gptq"]) >= 4 and not any(
        x.shape == last_down.shape and torch.equal(x, last_down) for x in seen["gptq"]
    )


@pytest.mark.parametrize("workers", [1, 2])
def test_sequential_keeps_hidden_states_and_gives_each_layer_the_inputs_of_a_full_pass(
    loaded, cal_w, workers
) -> None:
    """GPTQ's pass keeps each batch's hidden state between layers; every layer must get
    bit for bit the inputs a forward pass from the embeddings gives with the layers
    before it quantized (``layer_inputs``), including across a layer with nothing to
    calibrate (layer 2 here), and run each layer at most twice."""
    from labs.quant import quantize

    model = loaded.model
    names = [
        "model.layers.1.self_attn.q_proj",
        "model.layers.1.mlp.down_proj",
        "model.layers.3.mlp.gate_proj",
        "model.layers.3.mlp.up_proj",
    ]
    editor = fakequant.WeightEditor(model)
    runs = {i: 0 for i in range(4)}
    hooks = [
        model.model.layers[i].register_forward_hook(
            lambda *_, i=i: runs.__setitem__(i, runs[i] + 1)
        )
        for i in range(4)
    ]
    calibrated: list[int] = []

    def quantize_layer(layer: int, got: dict[str, torch.Tensor]) -> None:
        members = [n for n in names if n.startswith(f"model.layers.{layer}.")]
        assert sorted(got) == sorted(members)
        full_pass = calibrate.layer_inputs(model, layer, members, cal_w, 2, "cpu")
        for n in members:
            assert torch.equal(got[n], full_pass[n]), n
            editor.set(n, quantize(editor.original(n), "int4").dequantize())
        calibrated.append(layer)

    set_workers(workers)
    try:
        calibrate.sequential(model, names, cal_w, 2, "cpu", quantize_layer)
    finally:
        set_workers(None)
        editor.restore()
        for h in hooks:
            h.remove()
    assert calibrated == [1, 3]
    # The check's own full passes ran layers 0-1 and 0-3 once per batch (4 batches
    # each); what sequential ran is the rest: each layer at most twice, 3 not after.
    batches = cal_w.shape[0] // 2
    own = {0: 2 * batches, 1: 2 * batches, 2: batches, 3: batches}
    assert {i: runs[i] - own[i] for i in runs} == {
        0: batches,  # as is, to reach layer 1
        1: 2 * batches,  # captured, then quantized for layer 2
        2: batches,  # as is, nothing to calibrate
        3: batches,  # captured only: nothing after it
    }

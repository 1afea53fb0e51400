"""quant-algorithms runs the AWQ searches of every layer as one map over the cores: the
weights must be bit for bit those of searching one layer after another, each search
setting its weights before the next starts (what the lab did before), and progress must
count every search once, in order."""

from __future__ import annotations

import torch

from labs.lm import calibrate, fakequant, models, session
from labs.lm.batches import marked_batch
from labs.lm.evaluate import windows
from labs.quant.parallel import set_workers
from labs.quant_algorithms.compute import _awq, _awq_search, awq_groups
from labs.quant_algorithms.model import QuantAlgorithmsParams


def test_the_searches_of_all_layers_at_once_give_the_layer_by_layer_weights(loaded) -> None:
    params = QuantAlgorithmsParams(calibration_tokens=256, methods=["awq"])
    cal = windows(session.token_ids(loaded, models.CALIBRATION_FILE)[:256], params.context)
    names = params.model_spec().linear_names(params.tensors)
    points = [m[0] for layer in awq_groups(names).values() for _, m in layer]
    with calibrate.captured_inputs(loaded.model, points, params.context) as fp_inputs:
        with torch.no_grad(), marked_batch(0):
            loaded.model(input_ids=cal, use_cache=False)
    editor = fakequant.WeightEditor(loaded.model)

    torch.set_num_threads(2)
    set_workers(2)  # two threads, so the searches really run side by side
    seen: list[tuple[int, int]] = []
    try:
        _, alphas = _awq(fp_inputs, names, params, editor, lambda k, n: seen.append((k, n)))
        together = {n: editor.weight(n).detach().clone() for n in names}
        editor.restore()
        for i, groups in awq_groups(names).items():
            for group, members in groups:
                weights, _, alpha = _awq_search(
                    i, group, members, fp_inputs[members[0]], params, editor
                )
                assert alphas[f"alpha.{i}.{group[0].split('.')[-1]}"] == alpha
                for n, w in zip(members, weights, strict=True):
                    editor.set(n, w)
        one_by_one = {n: editor.weight(n).detach().clone() for n in names}
    finally:
        editor.restore()
        set_workers(None)
        torch.set_num_threads(1)
    jobs = sum(len(g) for g in awq_groups(names).values())
    assert seen == [(k, jobs) for k in range(1, jobs + 1)]
    assert len(alphas) == jobs and any(a > 0 for a in alphas.values())  # scales were searched
    for n in names:
        assert torch.equal(together[n], one_by_one[n]), n
        assert not torch.equal(together[n], editor.weight(n)), n  # quantized, then restored

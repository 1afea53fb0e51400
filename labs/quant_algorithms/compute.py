"""quant-algorithms' computation: calibrate, quantize each way, evaluate on both
texts. Torch is imported inside the functions."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from labs.base import Context
from labs.lm import spec
from labs.quant_algorithms.model import (
    AWQ_GROUPS,
    MethodResult,
    Quality,
    QuantAlgorithmsParams,
    QuantAlgorithmsResult,
)
from labs.quant_algorithms.present import quant_algorithms_finding

if TYPE_CHECKING:
    import torch

    from labs.lm.fakequant import WeightEditor
    from labs.lm.session import Evaluation


def _shared_input_sets(
    inputs: dict[str, torch.Tensor],
    originals: dict[str, torch.Tensor],
    key: str,
    options: dict[str, Any],
) -> list[list[str]]:
    """The linears of a layer grouped by the input tensor they share (q/k/v, gate/up),
    when stacking their rows changes no row's bits (no scale spans rows); otherwise each
    linear alone."""
    from labs.quant.awq import rows_independent

    sets: dict[int, list[str]] = {}
    for n in inputs:
        sets.setdefault(id(inputs[n]), []).append(n)
    out: list[list[str]] = []
    for members in sets.values():
        if rows_independent(key, options, originals[members[0]].shape[1]):
            out.append(members)
        else:
            out.extend([n] for n in members)
    return out


def awq_groups(names: list[str]) -> dict[int, list[tuple[tuple[str, ...], list[str]]]]:
    """By layer, in order, the linears of ``names`` that share an input: ``(group of
    AWQ_GROUPS, members present)``; AWQ's search reads the first member's input."""
    from labs.lm.calibrate import by_layer

    present = set(names)
    out: dict[int, list[tuple[tuple[str, ...], list[str]]]] = {}
    for i in by_layer(names):
        for group in AWQ_GROUPS:
            members = [n for n in (f"model.layers.{i}.{g}" for g in group) if n in present]
            if members:
                out.setdefault(i, []).append((group, members))
    return out


def _gptq_layer(
    inputs: dict[str, torch.Tensor], params: QuantAlgorithmsParams, editor: WeightEditor
) -> int:
    """GPTQ on one layer's linears (in place); returns their stored bytes. A layer's
    linears are independent, so they are spread over the cores."""
    import torch

    from labs.quant import quantize
    from labs.quant.gptq import gptq, hessian
    from labs.quant.parallel import map_largest_first

    options = spec.format_options(params.format, params.granularity)
    originals = {n: editor.original(n) for n in inputs}
    sets = _shared_input_sets(inputs, originals, params.format, options)

    def run_set(members: list[str]) -> list[torch.Tensor]:
        # GPTQ treats rows independently given H: linears fed the same input share
        # one H and, stacked, one pass over the columns.
        gr = gptq(
            torch.cat([originals[n] for n in members]),
            hessian(inputs[members[0]]),
            params.format,
            options,
            damp=params.damp,
            act_order=params.act_order,
        )
        return list(gr.weight.split([originals[n].shape[0] for n in members]))

    # Longest first, estimated as columns² × linears: down_proj's 768 columns take about
    # as long as the other sets together (its Cholesky steps grow with the cube), so it
    # starts first and the cores end the layer together instead of one waiting for it.
    found = map_largest_first(run_set, sets, lambda m: originals[m[0]].shape[1] ** 2 * len(m))
    nbytes = 0
    for members, weights in zip(sets, found, strict=True):
        for n, w in zip(members, weights, strict=True):
            editor.set(n, w)
            nbytes += int(quantize(w, params.format, **options).nbytes)
    return nbytes


def _awq_search(
    layer: int,
    group: tuple[str, ...],
    members: list[str],
    x: torch.Tensor,
    params: QuantAlgorithmsParams,
    editor: WeightEditor,
) -> tuple[list[torch.Tensor], int, float]:
    """AWQ on linears ``members`` of ``group`` in ``layer``, fed the same input ``x``:
    their quantized weights, stored bytes and the chosen α. Reads only weights as trained
    (``editor.original``), so the searches of every layer are independent."""
    from labs.quant.awq import SwiGLU, awq

    prefix = f"model.layers.{layer}."
    ws = [editor.original(n) for n in members]
    foldable = (
        group != AWQ_GROUPS[1]
        or editor.weight(prefix + "self_attn.v_proj").shape[0] == ws[0].shape[1]
    )
    # For gate/up the whole MLP's output is kept (SwiGLU, then the unquantized
    # down_proj), as the reference does; else each linear's own.
    block = SwiGLU(editor.original(prefix + "mlp.down_proj")) if group == AWQ_GROUPS[2] else None
    ar = awq(  # GQA: 1/s cannot be folded into v_proj, so no scale (n_grid=1) there
        ws,
        x,
        params.format,
        spec.format_options(params.format, params.granularity),
        block=block,
        n_grid=20 if foldable else 1,
        clip=[not n.endswith(("q_proj", "k_proj")) for n in members],  # as the reference
    )
    return ar.weights, sum(ar.nbytes), ar.alpha


def _awq(
    fp_inputs: dict[str, torch.Tensor],
    names: list[str],
    params: QuantAlgorithmsParams,
    editor: WeightEditor,
    on_search: Callable[[int, int], None],
) -> tuple[int, dict[str, float]]:
    """AWQ on ``names`` (in place); returns stored bytes and each search's α. Every
    search reads the unquantized model's inputs and weights, as the references do, so
    the searches of all layers are one map over the cores, largest first (a layer at a
    time left a core idle while one linear's clipping search ran); the weights are set
    once all are done."""
    import threading

    from labs.quant.parallel import map_largest_first

    jobs = [
        (i, group, members) for i, groups in awq_groups(names).items() for group, members in groups
    ]
    blocks = [f"model.layers.{i}.mlp.down_proj" for i, g, _ in jobs if g == AWQ_GROUPS[2]]
    for n in [*names, *blocks]:
        editor.original(n)  # the copies are made here, not by threads racing to make them
    cost = {n: editor.original(n).numel() * (3 if n.endswith("gate_proj") else 1) for n in names}
    lock, done = threading.Lock(), [0]

    def search(
        job: tuple[int, tuple[str, ...], list[str]],
    ) -> tuple[list[torch.Tensor], int, float]:
        i, group, members = job
        out = _awq_search(i, group, members, fp_inputs[members[0]], params, editor)
        with lock:
            done[0] += 1
            on_search(done[0], len(jobs))
        return out

    found = map_largest_first(search, jobs, lambda job: sum(cost[n] for n in job[2]))
    nbytes, detail = 0, {}
    for (i, group, members), (weights, b, alpha) in zip(jobs, found, strict=True):
        for n, dq in zip(members, weights, strict=True):
            editor.set(n, dq)
        nbytes += b
        detail[f"alpha.{i}.{group[0].split('.')[-1]}"] = alpha
    return nbytes, detail


def _quantize(
    method: str,
    ev: Evaluation,
    cal_w: torch.Tensor,
    fp_inputs: dict[str, torch.Tensor],
    names: list[str],
    params: QuantAlgorithmsParams,
    editor: WeightEditor,
    ctx: Context,
    frac: tuple[float, float],
) -> tuple[int, dict[str, float]]:
    """Quantize ``names`` in place with ``method``; returns stored bytes and details.
    GPTQ captures each layer's inputs with the layers before it quantized; AWQ reads
    ``fp_inputs``, the unquantized model's (``captured_inputs``), as the references do."""
    from labs.lm import calibrate, fakequant

    if method == "rtn":
        options = spec.format_options(params.format, params.granularity)
        return sum(
            r.nbytes for r in fakequant.quantize_model(editor, names, params.format, options)
        ), {}

    def on_layer(k: int, n: int) -> None:
        ctx.progress(frac[0] + frac[1] * k / n, f"{method}: layer {k}/{n}")

    if method == "gptq":
        nbytes = 0

        def layer(_i: int, inputs: dict[str, torch.Tensor]) -> None:
            nonlocal nbytes
            nbytes += _gptq_layer(inputs, params, editor)

        calibrate.sequential(ev.model, names, cal_w, ev.batch_size, ev.device, layer, on_layer)
        return nbytes, {}

    def on_search(k: int, n: int) -> None:
        ctx.progress(frac[0] + frac[1] * k / n, f"awq: search {k}/{n}")

    return _awq(fp_inputs, names, params, editor, on_search)


def _outliers(sums: dict[Any, Any], tokens: int) -> dict[str, Any]:
    """The most unequal input channel over every layer and AWQ input point."""
    from labs.lm.calibrate import summarize_outliers

    stats = summarize_outliers(sums, tokens)
    worst = max(stats, key=lambda o: o.max_over_median)
    return {**worst.as_dict(), "top_share_max": max(o.top_share for o in stats)}


def run(params: QuantAlgorithmsParams, ctx: Context) -> QuantAlgorithmsResult:
    import time

    from labs.lm import calibrate, fakequant, models, session
    from labs.lm.evaluate import compare, evaluate, windows
    from labs.quant.awq import search_rows

    t0 = time.perf_counter()
    ev = session.open_evaluation(params, ctx, 0.0, 0.1)
    cal_ids = session.token_ids(ev.loaded, models.CALIBRATION_FILE)
    if params.calibration_tokens > len(cal_ids):
        raise ValueError(
            f"calibration_tokens ({params.calibration_tokens}) is beyond the {len(cal_ids)} "
            "tokens of the calibration text"
        )
    cal_w = windows(cal_ids[: params.calibration_tokens], params.context)
    names = ev.spec.linear_names(params.tensors)
    # The calibration text's reference pass also collects AWQ's activation statistic
    # and the inputs its search reads (at most awq.MAX_ROWS tokens of each).
    groups = awq_groups(names).values() if "awq" in params.methods else []
    points = [members[0] for layer in groups for _, members in layer]
    rows = search_rows(cal_w.numel())
    with (
        calibrate.outlier_sums(ev.model) as sums,
        calibrate.captured_inputs(ev.model, points, params.context, rows) as fp_inputs,
    ):
        cal_base, cal_ref = evaluate(
            ev.model, cal_w, batch_size=ev.batch_size, device=ev.device, keep_reference=True
        )
    outliers = _outliers(sums, cal_w.numel()) if "awq" in params.methods else None
    numel = sum(ev.model.get_submodule(n).weight.numel() for n in names)
    fmt_label = spec.label(params.format, params.granularity)
    editor = fakequant.WeightEditor(ev.model)
    results: dict[str, MethodResult] = {}
    held_totals: dict[str, Any] = {}
    share = 0.88 / len(params.methods)
    for k, m in enumerate(params.methods):
        start = 0.12 + share * k
        tq = time.perf_counter()
        nbytes, detail = _quantize(
            m, ev, cal_w, fp_inputs, names, params, editor, ctx, (start, share * 0.6)
        )
        seconds = time.perf_counter() - tq
        ctx.progress(start + share * 0.6, f"{m}: evaluating")
        held = held_totals[m] = session.score(ev)
        cal, _ = evaluate(
            ev.model, cal_w, reference=cal_ref, batch_size=ev.batch_size, device=ev.device
        )
        editor.restore()
        results[m] = MethodResult(
            calibration=Quality.of(cal),
            heldout=Quality.of(held),
            weight_bytes=nbytes,
            bits_per_weight=8 * nbytes / numel,
            seconds=seconds,
            detail=detail,
        )
    if "rtn" in held_totals:
        for name, r in results.items():
            if name != "rtn":
                r.vs_rtn = compare(held_totals[name], held_totals["rtn"], "kl").as_dict()
    best = min(results, key=lambda m: results[m].heldout.kl_divergence)
    ties = [m for m in results if compare(held_totals[m], held_totals[best], "kl").inside_noise]
    result = QuantAlgorithmsResult(
        model=params.model,
        format=fmt_label,
        device=ctx.device,
        eval_tokens=params.eval_tokens,
        calibration_tokens=params.calibration_tokens,
        baseline_perplexity=ev.base.perplexity(),
        baseline_calibration_perplexity=cal_base.perplexity(),
        methods=results,
        best_method=best,
        best_method_ties=ties,
        outliers=outliers,
        finding="",
        seconds=time.perf_counter() - t0,
    )
    result.finding = quant_algorithms_finding(result.model_dump())
    return result

"""reproducibility's presenter: the environment, each comparison, and the findings."""

from __future__ import annotations

from labs.base import Context
from labs.reproducibility import Params, Trial


def present(trial: Trial, params: Params, ctx: Context) -> None:
    """Emit the run's events, in the order the run page shows them."""
    r = trial.result
    i = r.test_case
    ctx.progress(0.05, "recording the environment")
    ctx.table(
        "Environment (put this in the bug report)",
        ["item", "value"],
        [[k, v] for k, v in r.environment.model_dump().items()],
    )
    if trial.device == "cpu":
        ctx.log(
            "Ran on the CPU: results hold for this CPU, torch build and thread count; a GPU "
            "can differ."
        )
    ctx.log(
        f"Model: Linear({params.in_features}→{params.hidden}) → ReLU → Linear({params.hidden}→"
        f"{params.classes}), fp32, seed {params.seed}; input {r.input_shape}."
    )
    ctx.progress(0.15, "run 1 and run 2")
    ctx.progress(0.3, "batch invariance")
    ctx.progress(0.5, "fp32 vs low-precision weights")
    for note in trial.notes:
        ctx.log(note)
    for fmt, rows in trial.test_case_logits.items():
        ctx.table(
            f"Test case {i}: logits, fp32 vs {fmt}", ["class", "fp32", fmt, "difference"], rows
        )
    ctx.progress(0.85, "reporting")
    _comparisons_table(trial, ctx)
    for c in r.comparisons:
        ctx.metric(
            f"{c.format}_top1_agreement",
            c.top1_agreement,
            "fraction",
            f"top-1 agreement fp32 vs {c.format}",
        )
        ctx.metric(
            f"{c.format}_max_abs_diff", c.max_abs_diff, "logits", f"max |Δlogit| fp32 vs {c.format}"
        )
    ctx.metric("runs_max_abs_diff", r.runs_max_abs_diff, "logits", "run 1 vs run 2")

    from labs.viz import charts

    first = r.comparisons[0].format
    ctx.plot(
        f"Per-input max |Δlogit|, fp32 vs {first}",
        charts.histogram(
            trial.diffs_per_input,
            title=f"fp32 vs {first} weights",
            value_label="max |Δlogit| per input",
        ),
        {"format": first, "max_abs_diff_per_input": trial.diffs_per_input},
    )
    for f in r.findings:
        ctx.log(f)
    ctx.progress(1.0, "done")


def _comparisons_table(trial: Trial, ctx: Context) -> None:
    r = trial.result
    ctx.table(
        "Comparisons",
        ["comparison", "bitwise equal", "max |Δlogit|", "top-1 agreement"],
        [
            ["run 1 vs run 2", r.runs_bitwise_equal, r.runs_max_abs_diff, trial.runs_top1],
            [
                f"case {r.test_case} alone vs in batch",
                r.batch_invariant,
                r.batch_max_abs_diff,
                None,
            ],
            *(
                [
                    [
                        "1 thread vs all threads",
                        r.threads_bitwise_equal,
                        trial.threads_max_abs_diff,
                        None,
                    ]
                ]
                if r.threads_bitwise_equal is not None
                else []
            ),
            *[
                [
                    f"fp32 vs {c.format} ({c.quantizer})",
                    c.bitwise_equal,
                    c.max_abs_diff,
                    c.top1_agreement,
                ]
                for c in r.comparisons
            ],
        ],
    )

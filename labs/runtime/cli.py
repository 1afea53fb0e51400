"""The terminal runner: what ``lowbit lab list`` and ``lowbit lab run`` do.

The ``lowbit`` command (app.cli) hands in the labs to offer; nothing here reads
settings or imports the web app.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any

from labs.base import EventContext, InvalidParams, Lab, NeedsGPU


def parse_params(pairs: list[str]) -> dict[str, Any]:
    """``k=v`` pairs; ``v`` is JSON when it parses as JSON (``shape=[256,256]``), else a string."""
    params: dict[str, Any] = {}
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--param {pair!r}: expected KEY=VALUE")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        params[key.strip()] = value
    return params


def lab_list(labs: Mapping[str, Lab]) -> int:
    """Print ``labs`` as a table, by id."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lowbit labs")
    for col in ("id", "GPU", "time limit", "title"):
        table.add_column(col)
    for lab in sorted(labs.values(), key=lambda x: x.id):
        table.add_row(lab.id, lab.needs_gpu.value, f"{lab.time_limit_s:g} s", lab.title)
    Console().print(table)
    return 0


# Significant digits of a number in a table, a metric or a tile: what a reader compares.
CLI_DIGITS = 4


def cell(value: Any) -> str:
    """A table cell as a reader wants it: 17.718452608157502 → '17.72', 0.00139842657 →
    '0.001398', 9.1e-06 → '9.1×10⁻⁶'; integers with thousands separators."""
    from labs.viz.tiles import readable

    if isinstance(value, bool) or value is None:
        return "—" if value is None else ("yes" if value else "no")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return readable(value, CLI_DIGITS)
    return str(value)


def _print_result(out: Any, lab: Lab, result: Any, as_json: bool) -> None:
    """The exact result as JSON (``--json``), or what the run page leads with: the
    finding and the headline tiles, rounded."""
    if as_json:
        out.print_json(result.model_dump_json())
        return
    stored = result.model_dump(mode="json")
    if isinstance(stored.get("finding"), str) and stored["finding"]:
        out.print(stored["finding"], highlight=False)
    for t in lab.tiles(stored):
        out.print(f"  [bold]{t.label}[/]: {t.text}" + (f"  [dim]({t.means})[/]" if t.means else ""))
    out.print("[dim]Every value, unrounded: add --json[/]")


def lab_run(labs: Mapping[str, Lab], lab_id: str, params: list[str], as_json: bool = False) -> int:
    """Run lab ``lab_id`` of ``labs`` in this process with a progress bar; prints
    events and the result (rounded; ``as_json``: the exact result as JSON). Exit
    status: 0 done, 1 the lab failed, 2 bad lab id or parameters."""
    from rich.console import Console
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    err = Console(stderr=True)
    lab: Lab | None = labs.get(lab_id)
    if lab is None:
        err.print(
            f"[red]unknown lab {lab_id!r}[/]; `lowbit lab list` shows the labs: {', '.join(sorted(labs))}"
        )
        return 2
    try:
        validated = lab.validate(parse_params(params))
    except ValueError as e:  # InvalidParams, or a malformed --param
        lines = (
            [f"{k or 'params'}: {v}" for k, v in e.errors.items()]
            if isinstance(e, InvalidParams)
            else [str(e)]
        )
        err.print(f"[red]bad parameters for {lab_id}:[/]")
        for line in lines:
            err.print(f"  {line}")
        return 2
    out = Console()
    device = "cpu"
    if lab.needs_gpu is not NeedsGPU.no:
        import torch

        device = "cuda" if torch.cuda.is_available() else "cpu"
    with Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        TextColumn("{task.percentage:>3.0f}%"),
        TimeElapsedColumn(),
        console=out,
    ) as bar:
        task = bar.add_task(lab.id, total=1.0)

        def sink(kind: str, data: dict[str, Any]) -> None:
            if kind == "progress":
                bar.update(
                    task,
                    completed=data["fraction"],
                    description=f"{lab.id}: {data.get('message', '')}",
                )
            elif kind == "log":
                bar.console.print(data["text"])
            elif kind == "table":
                t = Table(title=data["title"])
                for c in data["columns"]:
                    t.add_column(str(c))
                for row in data["rows"]:
                    t.add_row(*(cell(x) for x in row))
                bar.console.print(t)
            elif kind == "metric":
                bar.console.print(f"{data['label']}: {cell(data['value'])} {data['unit']}".rstrip())
            elif kind == "plot":
                bar.console.print(f"[dim](plot: {data['title']} — shown on the web page)[/]")
            else:
                bar.console.print(f"{kind}: {data}")

        started = time.perf_counter()
        try:
            result = lab.run(validated, EventContext(sink, device=device))
        except Exception as e:  # the learner gets the message, not a stack trace
            err.print(f"[red]{lab.id} failed:[/] {type(e).__name__}: {e}")
            return 1
        bar.update(task, completed=1.0)
    out.print(f"[green]{lab.id} done[/] in {time.perf_counter() - started:.2f} s on {device}")
    _print_result(out, lab, result, as_json)
    return 0

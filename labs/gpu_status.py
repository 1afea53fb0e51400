"""Lab ``gpu-status``: what ``nvidia-smi`` says about this worker's GPUs, parsed.

Runs a fixed argv (no shell). Without an NVIDIA driver the lab still succeeds:
the finding says so and what to check next.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU
from labs.hardware import nvidia_smi
from labs.hardware.nvidia_smi import argv

# (query field, result attribute, unit) in the order nvidia-smi prints them.
FIELDS: tuple[tuple[str, str, str], ...] = (
    ("index", "index", ""),
    ("name", "name", ""),
    ("driver_version", "driver_version", ""),
    ("memory.used", "memory_used_mib", "MiB"),
    ("memory.total", "memory_total_mib", "MiB"),
    ("utilization.gpu", "utilization_pct", "%"),
    ("temperature.gpu", "temperature_c", "°C"),
    ("clocks.sm", "sm_clock_mhz", "MHz"),
    ("clocks.mem", "memory_clock_mhz", "MHz"),
    ("clocks.max.sm", "max_sm_clock_mhz", "MHz"),
    ("power.draw", "power_w", "W"),
    ("pstate", "pstate", ""),
    ("compute_cap", "compute_capability", ""),
)
# Drivers before ~510 do not know compute_cap; retry without it.
_OPTIONAL = {"compute_cap"}
_MISSING = {"", "N/A", "[N/A]", "[Not Supported]", "Not Supported", "[Unknown Error]"}


class GpuStatusParams(LabParams):
    """gpu-status takes no parameters."""


class GpuRow(BaseModel):
    index: int | None = None
    name: str | None = None
    driver_version: str | None = None
    memory_used_mib: float | None = Field(None, description="MiB (2^20 bytes)")
    memory_total_mib: float | None = Field(None, description="MiB (2^20 bytes)")
    utilization_pct: float | None = None
    temperature_c: float | None = None
    sm_clock_mhz: float | None = None
    memory_clock_mhz: float | None = None
    max_sm_clock_mhz: float | None = None
    power_w: float | None = None
    pstate: str | None = None
    compute_capability: str | None = None


class GpuStatusResult(LabResult):
    driver_found: bool
    finding: str
    next_steps: list[str]
    gpus: list[GpuRow]
    command: list[str]
    raw: str


_TEXT_ATTRS = {"name", "driver_version", "pstate", "compute_capability"}


def parse(raw: str, fields: tuple[str, ...]) -> list[GpuRow]:
    """Rows of ``--format=csv,noheader,nounits`` output for ``fields``; N/A becomes None."""
    attr = {f: a for f, a, _ in FIELDS}
    rows = []
    for line in raw.strip().splitlines():
        if not line.strip():
            continue
        cells = [c.strip() for c in line.split(",")]
        values: dict[str, object] = {}
        for f, cell in zip(fields, cells, strict=False):
            name = attr[f]
            if cell in _MISSING:
                continue
            if name in _TEXT_ATTRS:
                values[name] = cell
            else:
                try:
                    values[name] = int(cell) if name == "index" else float(cell)
                except ValueError:
                    continue
        rows.append(GpuRow.model_validate(values))
    return rows


def _no_driver(command: list[str], why: str, raw: str) -> GpuStatusResult:
    return GpuStatusResult(
        driver_found=False,
        finding=f"no NVIDIA driver on this worker: {why}",
        next_steps=[
            "This worker runs labs on the CPU; GPU labs need a worker with an NVIDIA GPU.",
            "On a machine that should have a GPU: `lspci | grep -i nvidia` shows whether the card is visible.",
            "Install the NVIDIA driver that matches the card; `nvidia-smi` must then list it.",
            "In a container: start it with `--gpus all` (NVIDIA Container Toolkit), or the driver stays outside.",
        ],
        gpus=[],
        command=command,
        raw=raw,
    )


@dataclass
class Status:
    """The computed result and the conversation with nvidia-smi that produced it."""

    result: GpuStatusResult
    log: list[str] = field(default_factory=list)  # commands and their output, in order
    fields: tuple[str, ...] = ()  # the query fields of the last command


def run(params: GpuStatusParams, ctx: Context) -> Status:
    ctx.progress(0.1, "looking for nvidia-smi")
    return read_status()


def read_status() -> Status:
    """Ask nvidia-smi (retrying without the fields an old driver lacks) and parse its rows;
    without a driver the result is a finding, not an error."""
    fields = tuple(f for f, _, _ in FIELDS)
    command = argv(fields)
    log: list[str] = []
    if not nvidia_smi.installed():
        log.append("nvidia-smi is not on this worker's PATH.")
        return Status(_no_driver(command, "nvidia-smi is not installed", ""), log, fields)
    log.append("$ " + " ".join(command))
    reply = nvidia_smi.query(fields)
    if not reply.ok and "not a valid field" in (reply.stdout + reply.stderr):
        fields = tuple(f for f in fields if f not in _OPTIONAL)
        command = argv(fields)
        log.append("this driver is too old for some fields; retrying: $ " + " ".join(command))
        reply = nvidia_smi.query(fields)
    if reply.returncode is None:
        why = reply.error or "nvidia-smi did not run"
        return Status(_no_driver(command, why, ""), log, fields)
    raw = (reply.stdout + reply.stderr).strip()
    log.append(raw or "(no output)")
    if reply.returncode != 0:
        first_line = raw.splitlines()[0] if raw else "no output"
        why = f"nvidia-smi exited with code {reply.returncode} ({first_line})"
        return Status(_no_driver(command, why, raw), log, fields)
    gpus = parse(reply.stdout, fields)
    if not gpus:
        return Status(_no_driver(command, "nvidia-smi lists no GPUs", raw), log, fields)
    first = gpus[0]
    finding = (
        f"{len(gpus)} GPU(s): {first.name}, driver {first.driver_version}"
        + (f", compute capability {first.compute_capability}" if first.compute_capability else "")
        + (
            f", {first.memory_used_mib:.0f} of {first.memory_total_mib:.0f} MiB in use"
            if first.memory_total_mib
            else ""
        )
    )
    result = GpuStatusResult(
        driver_found=True,
        finding=finding,
        next_steps=[
            "memory.used counts every process on the GPU, not only yours; torch's own view is torch.cuda.memory_allocated().",
            "A clock far below clocks.max.sm at high utilization points at power or thermal throttling.",
        ],
        gpus=gpus,
        command=command,
        raw=raw,
    )
    return Status(result, log, fields)


def present(status: Status, params: GpuStatusParams, ctx: Context) -> None:
    """The commands and their output, then (with GPUs) the table and memory metrics."""
    for line in status.log:
        ctx.log(line)
    r = status.result
    if not r.driver_found:
        return
    units = {a: u for _, a, u in FIELDS}
    shown = [a for f, a, _ in FIELDS if f in status.fields]
    ctx.table(
        "GPUs (nvidia-smi)",
        [f"{f} ({units[a]})" if units[a] else f for f, a in zip(status.fields, shown, strict=True)],
        [[getattr(g, a) for a in shown] for g in r.gpus],
    )
    for g in r.gpus:
        if g.memory_used_mib is not None and g.memory_total_mib:
            ctx.metric(
                f"gpu{g.index}_memory_used", g.memory_used_mib, "MiB", f"GPU {g.index} memory used"
            )


LAB = Lab(
    id="gpu-status",
    title="GPU status (nvidia-smi)",
    summary="What nvidia-smi reports for this worker's GPUs — name, driver, memory, utilization, temperature, clocks, compute capability — parsed into a table.",
    needs_gpu=NeedsGPU.preferred,
    params=GpuStatusParams,
    run=run,
    present=present,
    time_limit_s=30.0,
    memory_limit_mb=512,
)

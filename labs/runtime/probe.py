"""Test-only labs that attack their own sandbox. Never registered: the tests offer
them by naming this module in ``LOWBIT_EXTRA_LAB_MODULES`` (see
``app.runs.catalog``); each mode tries one thing the sandbox must prevent and
reports whether it was blocked."""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path
from typing import Literal

from pydantic import Field

from labs.base import Context, Lab, LabParams, LabResult, NeedsGPU

Mode = Literal[
    "ok",
    "gpu_memory",
    "unix_socket",
    "network",
    "read_db",
    "read_secret",
    "write_outside",
    "fork_bomb",
    "memory",
    "spin",
    "flood",
    "sleep",
    "big_result",
    "scan_memory",
    "setsid_escape",
    "list_processes",
    "leave_mark",
]
# Forks the bomb attempts; the sandbox's process limit must stop it well before.
FORK_BOMB_ATTEMPTS = 2000
MIB = 2**20
# More than the GPU probe's memory limit, far less than any GPU: only the cap can refuse it.
GPU_HOG_BYTES = 8 * 2**30
# scan_memory: the target's bytes are XOR-ed with this, and memory is read in chunks this big.
SECRET_MASK = 0x5A
SCAN_CHUNK = 1 * MIB
# <linux/prctl.h>
PR_SET_NAME = 15
PR_SET_DUMPABLE = 4
# How long setsid_escape's daemon lives if nothing kills it, seconds.
ESCAPE_SLEEP_S = 60
# leave_mark: what an earlier run left in this process, in its environment and in its
# temp dir. A lab process runs one job (spares included): the next run must find none.
_MARKS: list[str] = []
MARK_ENV = "LOWBIT_PROBE_MARK"
MARK_PREFIX = "mark-"


class ProbeParams(LabParams):
    mode: Mode = Field(default="ok", description="What to attempt")
    target: str = Field(
        default="", max_length=4096, description="host:port, a path, or a secret to look for"
    )
    seconds: float = Field(
        default=0.0, ge=0, le=60, description="How long `sleep` sleeps, in seconds"
    )
    megabytes: int = Field(
        default=100,
        ge=1,
        le=1000,
        description="How much `flood` prints (or `big_result` returns), in MiB",
    )


class ProbeResult(LabResult):
    mode: str
    blocked: bool
    detail: str
    uid: int
    cwd: str


def _network(target: str) -> tuple[bool, str]:
    host, _, port = target.rpartition(":")
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=2):
            return False, f"connected to {target}"
    except OSError as e:
        return True, f"{type(e).__name__}: {e}"


def _unix(path: str) -> tuple[bool, str]:
    try:
        with socket.socket(socket.AF_UNIX) as s:
            s.settimeout(2)
            s.connect(path)
        return False, f"connected to {path}"
    except OSError as e:
        return True, f"{type(e).__name__}: {e}"


def _read(path: str) -> tuple[bool, str]:
    try:
        with open(path, "rb") as f:
            head = f.read(16)
        return False, f"read {len(head)} bytes of {path}"
    except OSError as e:
        return True, f"{type(e).__name__}: {e}"


def _secret(target: str) -> tuple[bool, str]:
    import gc

    found = [
        k
        for k in os.environ
        if any(w in k.upper() for w in ("SECRET", "PASSWORD", "TOKEN", "LOWBIT"))
    ]
    for path in ("/proc/self/environ", f"/proc/{os.getppid()}/environ", "/proc/1/environ"):
        try:
            with open(path, "rb") as f:
                data = f.read()
            if b"LOWBIT_" in data or (target and target.encode() in data):
                found.append(path)
        except OSError:
            pass
    if target:
        # The worker's settings object (labs never import app: found by its class name).
        found += [
            "Settings object"
            for o in gc.get_objects()
            if type(o).__name__ == "Settings" and getattr(o, "secret_key", None) == target
        ]
    return not found, f"found: {', '.join(found)}" if found else "no secret reachable"


def _scan_memory(target: str) -> tuple[bool, str]:
    """Search every writable mapping of this process for a secret. ``target`` is the
    secret with each byte XOR ``SECRET_MASK``, in hex, so the only plain copy in this
    process is the needle built here (its address, and the read buffer's, are skipped)."""
    import ctypes

    needle = bytearray.fromhex(target)
    for i in range(len(needle)):
        needle[i] ^= SECRET_MASK
    n = len(needle)
    buf = bytearray(SCAN_CHUNK + n)
    mine = [
        (a, a + len(b))
        for b in (needle, buf)
        for a in [ctypes.addressof((ctypes.c_char * len(b)).from_buffer(b))]
    ]
    # Set-uid transitions make a process undumpable, which closes /proc/self/mem to
    # it; a lab may undo that (prctl is not privileged), so the probe does too.
    ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 1, 0, 0, 0)
    hits: list[str] = []
    scanned = 0
    with open("/proc/self/maps", encoding="utf-8") as f:
        maps = [line.split() for line in f]
    with open("/proc/self/mem", "rb", buffering=0) as mem:
        for fields in maps:
            perms, name = fields[1], fields[5] if len(fields) > 5 else "[anon]"
            if not perms.startswith("rw") or name.startswith(("/dev/", "[v")):
                continue
            lo, hi = (int(x, 16) for x in fields[0].split("-"))
            for pos in range(lo, hi, SCAN_CHUNK):
                try:
                    mem.seek(pos)
                    got = mem.readinto(memoryview(buf)[: min(SCAN_CHUNK + n - 1, hi - pos)])
                except OSError:
                    break
                scanned += got or 0
                i = buf.find(needle, 0, got or 0)
                while i >= 0:
                    if not any(s <= pos + i < e for s, e in mine):
                        hits.append(f"{name}@{pos + i:#x}")
                    i = buf.find(needle, i + 1, got or 0)
    buf[:] = bytes(len(buf))
    needle[:] = bytes(n)
    return not hits, (
        f"found {len(hits)} copies in memory: {', '.join(hits[:5])}"
        if hits
        else f"not found in {scanned // MIB} MiB of writable memory"
    )


def _setsid_escape(name: str) -> tuple[bool, str]:
    """Leave a daemon behind (fork, ``setsid()``, fork again) named ``name``, which the
    test then looks for among the host's processes once the run is over."""
    import ctypes

    pid = os.fork()
    if pid == 0:
        try:
            os.setsid()
            if os.fork() == 0:
                ctypes.CDLL(None).prctl(PR_SET_NAME, name.encode()[:15], 0, 0, 0)
                for fd in range(4):  # let go of the run's pipes, as a careful daemon does
                    os.close(fd)
                time.sleep(ESCAPE_SLEEP_S)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)
    return False, f"left a setsid() daemon named {name!r}; the test looks for it"


def _processes() -> tuple[bool, str]:
    pids = sorted(int(d) for d in os.listdir("/proc") if d.isdigit())
    others = [p for p in pids if p != os.getpid()]
    return not others, f"{len(pids)} processes visible in /proc (this one is {os.getpid()})"


def _write_outside(target: str, tmpdir: str) -> tuple[bool, str]:
    places = [target] if target else []
    # World-writable places on a usual Linux host, then the code and the interpreter.
    places += [
        "/var/tmp",  # noqa: S108
        "/dev/shm",  # noqa: S108
        "/run/lock",
        str(Path(__file__).resolve().parents[2]),
        os.path.dirname(sys.executable),
        "/",
    ]  # noqa: S108
    wrote = []
    for d in places:
        try:
            p = os.path.join(d, f"lowbit-probe-{os.getpid()}")
            with open(p, "w") as f:
                f.write("x")
            os.unlink(p)
            wrote.append(d)
        except OSError:
            pass
    with open(os.path.join(tmpdir, "inside.txt"), "w") as f:
        f.write("the lab's own temp dir is writable")
    return (
        not wrote,
        f"wrote to: {', '.join(wrote)}"
        if wrote
        else f"all {len(places)} places refused; {tmpdir} writable",
    )


def _leave_mark(tmpdir: str) -> tuple[bool, str]:
    found = [f"in memory: {', '.join(_MARKS)}"] if _MARKS else []
    if os.environ.get(MARK_ENV):
        found.append(f"in the environment: {os.environ[MARK_ENV]}")
    files = sorted(f for f in os.listdir(tmpdir) if f.startswith(MARK_PREFIX))
    if files:
        found.append(f"in {tmpdir}: {', '.join(files)}")
    token = os.urandom(4).hex()
    _MARKS.append(token)
    os.environ[MARK_ENV] = token
    with open(os.path.join(tmpdir, MARK_PREFIX + token), "w") as f:
        f.write(token)
    return not found, f"left mark {token}; earlier marks: {'; '.join(found) or 'none'}"


def _fork_bomb() -> tuple[bool, str]:
    pids: list[int] = []
    error = ""
    try:
        for _ in range(FORK_BOMB_ATTEMPTS):
            pid = os.fork()
            if pid == 0:
                time.sleep(30)
                os._exit(0)
            pids.append(pid)
    except OSError as e:
        error = f"{type(e).__name__}: {e}"
    for pid in pids:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    return bool(error), f"{len(pids)} forks succeeded; then {error or 'no limit hit'}"


def run(params: ProbeParams, ctx: Context) -> ProbeResult:
    blocked, detail = True, ""
    m = params.mode
    if m == "ok":
        ctx.log("probe started")
        ctx.progress(0.5, "half way")
        ctx.table("numbers", ["n", "square"], [[i, i * i] for i in range(4)])
        ctx.metric("answer", 42.0, "units")
        detail = "ran"
    elif m == "network":
        blocked, detail = _network(params.target)
    elif m == "unix_socket":
        blocked, detail = _unix(params.target)
    elif m == "read_db":
        blocked, detail = _read(params.target)
    elif m == "read_secret":
        blocked, detail = _secret(params.target)
    elif m == "scan_memory":
        blocked, detail = _scan_memory(params.target)
    elif m == "setsid_escape":
        blocked, detail = _setsid_escape(params.target)
    elif m == "list_processes":
        blocked, detail = _processes()
    elif m == "write_outside":
        blocked, detail = _write_outside(params.target, ctx.tmpdir)
    elif m == "fork_bomb":
        blocked, detail = _fork_bomb()
    elif m == "leave_mark":
        blocked, detail = _leave_mark(ctx.tmpdir)
    elif m == "memory":
        import torch

        hog = torch.ones(4 * 2**30 // 4)  # 4 GiB of float32
        detail = f"allocated {hog.numel() * 4 / 2**30:.1f} GiB"
        blocked = False
    elif m == "gpu_memory":
        import torch

        hog = torch.empty(GPU_HOG_BYTES, dtype=torch.uint8, device=ctx.device)
        detail = f"allocated {hog.numel() / 2**30:.0f} GiB on {ctx.device}"
        blocked = False
    elif m == "spin":
        while True:
            pass
    elif m == "flood":
        line = "x" * 1023 + "\n"
        block = line * 1024  # 1 MiB
        for _ in range(params.megabytes):
            sys.stdout.write(block)
        sys.stdout.flush()
        detail = f"printed {params.megabytes} MiB"
        blocked = False
    elif m == "big_result":
        detail = "x" * (params.megabytes * MIB)  # a result over the sandbox's result limit
        blocked = False
    elif m == "sleep":
        end = time.monotonic() + params.seconds
        while (left := end - time.monotonic()) > 0:
            ctx.progress(1 - left / max(params.seconds, 1e-9), f"{left:.1f} s left")
            time.sleep(min(0.25, left))
        detail = f"slept {params.seconds} s"
    return ProbeResult(mode=m, blocked=blocked, detail=detail, uid=os.getuid(), cwd=os.getcwd())


PROBES = (
    Lab(
        id="sandbox-probe",
        title="Sandbox probe (tests only)",
        summary="Attacks its own sandbox; offered only where the tests name this module.",
        needs_gpu=NeedsGPU.no,
        params=ProbeParams,
        run=run,
        time_limit_s=2.0,
        memory_limit_mb=256,
    ),
    Lab(
        id="sandbox-probe-slow",
        title="Sandbox probe with a long time limit and wide ops (tests only)",
        summary="Sleeps on request, to test cancellation and lost workers; its child gets "
        "every core as torch threads, as a model lab's does.",
        needs_gpu=NeedsGPU.no,
        params=ProbeParams,
        run=run,
        time_limit_s=30.0,
        memory_limit_mb=256,
        wide_ops=True,
    ),
    Lab(
        id="sandbox-probe-gpu",
        title="Sandbox probe on a GPU worker (tests only)",
        summary="Runs on the GPU when the worker has one, to test the GPU memory cap.",
        needs_gpu=NeedsGPU.preferred,
        params=ProbeParams,
        run=run,
        time_limit_s=60.0,
        memory_limit_mb=1024,
    ),
    Lab(
        id="sandbox-probe-gpu-only",
        title="Sandbox probe that requires a GPU (tests only)",
        summary="Goes to the gpu queue: only a GPU worker takes it; without one it waits.",
        needs_gpu=NeedsGPU.required,
        params=ProbeParams,
        run=run,
        time_limit_s=60.0,
        memory_limit_mb=1024,
    ),
)

# What a catalogue that names this module offers (``load_labs`` reads ``LABS``).
LABS = PROBES

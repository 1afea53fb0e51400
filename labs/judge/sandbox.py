"""The trusted side of the judge: starts the sandbox, hands it one submission at a
time and reads back the learner's outputs, its captured output and what held.

``Judge`` owns one bubblewrap sandbox whose zygote (``labs.judge.runner``) has
imported torch; ``run`` costs a fork inside it, not an interpreter start. Where
any protection cannot be applied, ``JudgeUnavailable`` says why and no learner
code runs: there is no unsandboxed fallback.

This process gives the sandbox nothing but the code and the encoded calls: the
sandbox's environment is empty, it inherits only the control socket and the
seccomp program, and it sees no database file, socket or project file.
"""

from __future__ import annotations

import array
import functools
import json
import os
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from labs.judge import cgroups, wire
from labs.judge.gpu import GpuAccess
from labs.judge.policy import SANDBOX_TMP, SECCOMP_DENY, Limits, bwrap_args

START_TIMEOUT_S = 90.0  # importing torch on a loaded 2-core machine
GRACE_S = 5.0  # past the wall time before the whole sandbox is killed from outside
# How often a running submission looks whether it was cancelled (``should_stop``).
CANCEL_POLL_S = 0.1
# The sandbox's cgroup holds the zygote, bwrap's init and every child: room for a
# fork-bombing child's full RLIMIT_NPROC and then some.
CGROUP_TASKS_PER_NPROC = 2
EXIT_LIMITS_FAILED = 71
EXIT_BAD_PAYLOAD = 72
# What every submission must have had; any of them missing refuses the submission.
REQUIRED = (
    *("namespaces", "filesystem", "user", "capabilities", "seccomp", "no_new_privs"),
    *("network", "rlimits", "wall_time"),
)


CANCELLED = "cancelled: your code was stopped"


class Stopped(Exception):
    """``should_stop`` said stop before the submission's child was started."""


class JudgeUnavailable(RuntimeError):
    """The sandbox cannot be set up here; the message says why, for the learner."""


@dataclass
class Execution:
    """What one submission did. ``results`` holds one dict per call (value, error,
    seconds) or is None when the process produced none."""

    status: str  # "ok", "timed_out", "cancelled" or "error"
    results: list[dict[str, Any]] | None
    output: str
    output_truncated: bool
    output_bytes: int
    seconds: float
    message: str | None = None
    max_rss_bytes: int | None = None
    protections: dict[str, dict[str, Any]] = field(default_factory=dict)


class _Drain(threading.Thread):
    """Reads a pipe to EOF, keeping at most ``cap`` bytes and counting the rest."""

    def __init__(self, fd: int, cap: int):
        super().__init__(daemon=True)
        self.fd, self.cap = fd, cap
        self.kept = bytearray()
        self.total = 0

    def run(self) -> None:
        with os.fdopen(self.fd, "rb", buffering=0) as f:
            while chunk := f.read(1 << 16):
                self.total += len(chunk)
                room = self.cap - len(self.kept)
                if room > 0:
                    self.kept += chunk[:room]


def _feed(fd: int, data: bytes) -> None:
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    except OSError:
        pass  # the child ended (or refused) before reading it all


class Judge:
    """One warm sandbox. Not thread-safe by design: one submission at a time."""

    def __init__(
        self, limits: Limits | None = None, bwrap: str | None = None, gpu: GpuAccess | None = None
    ):
        self.limits = limits or Limits()
        self.gpu = gpu  # a Triton sandbox on a GPU worker (labs.judge.gpu); else none
        self.bwrap = (shutil.which("bwrap") or "") if bwrap is None else bwrap
        self._proc: subprocess.Popen[bytes] | None = None
        self._ctrl: socket.socket | None = None
        self._buffer = b""
        self._eof = False
        self._inside: dict[str, dict[str, Any]] = {}
        # While the zygote is starting: when it must have said "ready" by.
        self._ready_by: float | None = None
        self._cgroup = cgroups.Cgroup(detail="not started")
        self._lock = threading.Lock()

    # -- the sandbox's life ---------------------------------------------------

    def start(self, should_stop: Callable[[], bool] | None = None) -> None:
        """Start the sandbox and wait for its zygote. A ``should_stop`` that answers
        True meanwhile raises ``Stopped`` and leaves the sandbox starting: the next
        submission waits for the rest of its start instead of paying for a new one."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._launch()
        if self._ready_by is None:
            return
        while (reply := self._reply(CANCEL_POLL_S)) is None and not self._eof:
            if time.monotonic() > self._ready_by:
                break
            if should_stop is not None and should_stop():
                raise Stopped
        if reply is None or reply.get("op") != "ready":
            why = (reply or {}).get("error") or self._stderr() or "no answer"
            self.close()
            raise JudgeUnavailable(f"the sandbox did not start: {why}")
        self._inside, self._ready_by = reply["protections"], None

    def _launch(self) -> None:
        if not self.bwrap:
            raise JudgeUnavailable("bubblewrap (bwrap) is not installed, so no code can run")
        _remove_stale_cgroups()
        seccomp_fd = _compile_seccomp()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        args = bwrap_args(
            self.bwrap, seccomp_fd, theirs.fileno(), self.limits, os.geteuid() == 0, self.gpu
        )
        lim = self.limits
        self._cgroup = cgroups.create(lim.address_space_bytes, lim.nproc * CGROUP_TASKS_PER_NPROC)
        args = self._cgroup.wrap(args)
        try:
            self._proc = subprocess.Popen(
                args,
                env={},
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                pass_fds=(seccomp_fd, theirs.fileno()),
                close_fds=True,
            )
        finally:
            os.close(seccomp_fd)
            theirs.close()
        self._ctrl, self._buffer, self._eof = ours, b"", False
        self._ready_by = time.monotonic() + START_TIMEOUT_S

    def _stderr(self) -> str:
        proc = self._proc
        if proc is None or proc.stderr is None:
            return ""
        if proc.poll() is None:
            proc.kill()
        proc.wait()
        return proc.stderr.read(2000).decode(errors="replace").strip()

    def close(self) -> None:
        if self._ctrl is not None:
            self._ctrl.close()
            self._ctrl = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()  # bwrap's init dies with it, and the PID namespace with it
            self._proc.wait()
            if self._proc.stderr is not None:
                self._proc.stderr.close()
            self._proc = None
        self._ready_by = None
        self._cgroup.remove()

    def _reply(self, timeout_s: float) -> dict[str, Any] | None:
        assert self._ctrl is not None
        deadline = time.monotonic() + timeout_s
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self._ctrl.settimeout(left)
            try:
                chunk = self._ctrl.recv(65536)
            except (TimeoutError, OSError):
                return None
            if not chunk:
                self._eof = True
                return None
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        return dict(json.loads(line))

    # -- one submission -------------------------------------------------------

    def protections(self, limits: Limits) -> dict[str, dict[str, Any]]:
        """What the sandbox holds, as each submission records it."""
        p = {
            "namespaces": {
                "enabled": True,
                "detail": "bubblewrap: new PID, network, IPC, UTS and mount namespaces"
                + ("" if os.geteuid() == 0 else ", user namespace (no nested ones)"),
            },
            "filesystem": {
                "enabled": True,
                "detail": "empty root; read-only interpreter and packages; "
                f"{SANDBOX_TMP} a private {limits.tmp_bytes // 2**20} MiB tmpfs, the only writable place",
            },
            "seccomp_rules": {
                "enabled": True,
                "detail": "refused: " + ", ".join(SECCOMP_DENY[:10]) + ", … and sockets "
                "other than AF_UNIX, clone with namespace flags",
            },
            "rlimits": {
                "enabled": True,
                "detail": f"CPU {limits.cpu_s} s, address space "
                + (
                    "unlimited (CUDA reserves its own; the cgroup bounds memory)"
                    if self.gpu is not None
                    else f"{limits.address_space_bytes // 2**20} MiB"
                )
                + f", {limits.nproc} tasks, "
                f"files {limits.file_bytes // 2**20} MiB, {limits.nofile} open files",
            },
            "gpu": _gpu_protection(self.gpu),
            "wall_time": {
                "enabled": True,
                "detail": f"{limits.wall_s:g} s, then the tree is killed",
            },
            "output": {"enabled": True, "detail": f"{limits.output_bytes} bytes kept"},
            "cgroup": {"enabled": self._cgroup.enabled, "detail": self._cgroup.detail},
        }
        p.update(self._inside)
        return p

    def run(
        self,
        code: str,
        calls: list[tuple[str, tuple[Any, ...]]],
        limits: Limits | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> Execution:
        """Run ``code`` and then each ``(function, args)`` call in a fresh child.

        ``should_stop`` is asked every CANCEL_POLL_S while the child runs: once it
        answers True the zygote kills the child's tree and the execution ends
        ``cancelled``; the zygote stays warm for the next submission."""
        limits = limits or self.limits
        stop = should_stop or _never
        with self._lock:
            try:
                if stop():
                    raise Stopped
                self.start(stop)
            except Stopped:
                ended = {"enabled": True, "detail": "cancelled before any code ran"}
                return Execution(
                    "cancelled", None, "", False, 0, 0.0, CANCELLED, None, {"process_tree": ended}
                )
            protections = self.protections(limits)
            missing = [k for k in REQUIRED if not protections.get(k, {}).get("enabled")]
            if self.gpu is not None and not self._cgroup.enabled:
                missing.append("cgroup (a GPU sandbox has no address-space limit)")
            if missing:
                self.close()
                raise JudgeUnavailable(
                    "the sandbox lacks " + ", ".join(missing) + ": refusing to run"
                )
            payload = wire.encode({"code": code, "calls": [[f, list(a)] for f, a in calls]})
            return self._submit(payload, limits, protections, stop)

    def _submit(
        self,
        payload: bytes,
        limits: Limits,
        protections: dict[str, Any],
        should_stop: Callable[[], bool],
    ) -> Execution:
        assert self._ctrl is not None
        payload_r, payload_w = os.pipe()
        out_r, out_w = os.pipe()
        res_r, res_w = os.pipe()
        cancel_r, cancel_w = os.pipe()
        message = json.dumps({"op": "run", "limits": self._for_child(limits)}).encode() + b"\n"
        fds = array.array("i", [payload_r, out_w, res_w, cancel_r])
        try:
            self._ctrl.sendmsg([message], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
        finally:
            for fd in (payload_r, out_w, res_w, cancel_r):
                os.close(fd)
        feeder = threading.Thread(target=_feed, args=(payload_w, payload), daemon=True)
        out, res = _Drain(out_r, limits.output_bytes), _Drain(res_r, limits.result_bytes)
        for t in (feeder, out, res):
            t.start()
        start = time.monotonic()
        try:
            report = self._await_report(limits.wall_s + GRACE_S, cancel_w, should_stop)
        finally:
            os.close(cancel_w)
        if report is None:  # the zygote is gone or stuck: end the whole sandbox
            died = self._eof or self._proc is None or self._proc.poll() is not None
            self.close()
            report = {
                "status": "sandbox_died" if died else "timed_out",
                "seconds": time.monotonic() - start,
                "exit_code": None,
                "left_behind": 0,  # the PID namespace ended with the sandbox
            }
        for t in (feeder, out, res):
            t.join(timeout=GRACE_S)
        return self._outcome(report, out, res, limits, protections)

    def _for_child(self, limits: Limits) -> dict[str, Any]:
        child: dict[str, Any] = dict(limits.for_child())
        if self.gpu is not None:
            # CUDA reserves far more address space than it uses and fails under any
            # RLIMIT_AS; the sandbox's cgroup bounds the memory instead.
            child.update({"as": -1, "device": "cuda"})
        return child

    def _await_report(
        self, timeout_s: float, cancel_w: int, should_stop: Callable[[], bool]
    ) -> dict[str, Any] | None:
        """The zygote's report on the running child, asking ``should_stop`` meanwhile;
        once it says stop, the zygote is told (a byte on the cancel pipe) and gets
        GRACE_S more to kill the tree and answer."""
        deadline = time.monotonic() + timeout_s
        cancelled = False
        while True:
            if not cancelled and should_stop():
                cancelled = True
                try:
                    os.write(cancel_w, b"x")
                except OSError:  # the zygote is done with this child already
                    pass
                deadline = min(deadline, time.monotonic() + GRACE_S)
            left = deadline - time.monotonic()
            report = self._reply(min(CANCEL_POLL_S, max(left, 0.0)))
            if report is not None or self._eof or left <= 0:
                return report
            if self._proc is None or self._proc.poll() is not None:
                return None

    def _outcome(
        self,
        report: dict[str, Any],
        out: _Drain,
        res: _Drain,
        limits: Limits,
        protections: dict[str, Any],
    ) -> Execution:
        text = out.kept.decode("utf-8", errors="replace")
        truncated = out.total > len(out.kept)
        rss = report.get("max_rss_kib")
        e = Execution(
            status="ok",
            results=None,
            output=text,
            output_truncated=truncated,
            output_bytes=out.total,
            seconds=float(report.get("seconds") or 0.0),
            max_rss_bytes=int(rss) * 1024 if rss else None,
            protections=protections,
        )
        left = report.get("left_behind")
        e.protections["process_tree"] = {
            "enabled": left == 0,
            "detail": "every process the submission started was killed"
            if left == 0
            else f"{left} processes outlived the submission; the sandbox was restarted",
        }
        if left != 0:
            self.close()
        code = report.get("exit_code")
        if code == EXIT_LIMITS_FAILED:
            raise JudgeUnavailable(
                "the sandbox could not apply its resource limits: refusing to run"
            )
        if report.get("status") == "timed_out":
            e.status, e.message = "timed_out", f"stopped after the {limits.wall_s:g} s time limit"
            return e
        if report.get("status") == "cancelled":
            e.status, e.message = "cancelled", CANCELLED
            return e
        if report.get("status") == "sandbox_died":
            e.status, e.message = (
                "error",
                "your code ended the sandbox itself; it has been restarted",
            )
            return e
        if res.total > res.cap:
            e.status, e.message = "error", "your return values are too large to send back"
            return e
        try:
            results = wire.decode(bytes(res.kept), limits.result_bytes) if res.kept else None
        except ValueError as err:
            results, e.message = None, f"your code's results could not be read: {err}"
        if not isinstance(results, list):
            e.status = "error"
            e.message = e.message or _exit_message(code)
            return e
        e.results = results
        return e


def _gpu_protection(gpu: GpuAccess | None) -> dict[str, Any]:
    """What the sandbox sees of the GPU ("enabled" means: confined to its device)."""
    if gpu is None:
        return {"enabled": True, "detail": "no GPU device; Triton runs in its interpreter"}
    nodes = ", ".join(inside for _host, inside in gpu.nodes)
    return {"enabled": True, "detail": f"only {nodes}; Triton compiles for the GPU"}


@functools.cache
def _remove_stale_cgroups() -> None:
    """Once per process, before its first sandbox: the cgroups a SIGKILLed worker
    left behind go (``cgroups.remove_stale``; idempotent, so a race is harmless)."""
    cgroups.remove_stale()


def _never() -> bool:
    return False


def _exit_message(code: int | None) -> str:
    if code is not None and code < 0:
        return f"your code's process was killed by signal {-code} before it returned (memory?)"
    return f"your code's process exited (status {code}) before it returned"


def _compile_seccomp() -> int:
    """The seccomp program in an anonymous file, rewound for bwrap to read."""
    from labs.judge.policy import seccomp_filter

    fd = os.memfd_create("lowbit-judge-seccomp", 0)
    try:
        with os.fdopen(os.dup(fd), "wb") as f:
            seccomp_filter(f)
    except (ImportError, OSError, RuntimeError) as e:
        os.close(fd)
        raise JudgeUnavailable(f"the seccomp filter cannot be built (libseccomp): {e}") from None
    os.lseek(fd, 0, os.SEEK_SET)
    return fd

"""Contain each lab child's process tree, so nothing it starts outlives its run.

A process group is not enough: a grandchild that calls ``setsid()`` leaves it. Where
the kernel allows, the child is forked as PID 1 of a new PID namespace: when it
exits or is killed, the kernel kills every process in the namespace, daemons
included, and the child mounts a fresh ``/proc`` that shows only them (see
``sandbox.enter``). Where it does not, the child joins a cgroup v2 of its own
that is killed whole (``cgroup.kill``) when the run ends. Each run records which
one held, and why the other did not.
"""

from __future__ import annotations

import ctypes
import os
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from labs.runtime.mounts import LIBC, check

CLONE_NEWPID = 0x20000000
# How long a killed cgroup may take to empty before the run says it did not, seconds.
CGROUP_EMPTY_S = 2.0
CGROUP_POLL_S = 0.005
MODES = ("auto", "pidns", "cgroup", "none")
EXIT_BROKEN = 71  # EX_OSERR: the forking process can no longer fork where it should


def _item(enabled: bool, detail: str) -> dict[str, Any]:
    return {"enabled": enabled, "detail": detail}


def cgroup_base() -> str | None:
    """This process's cgroup v2 directory, if it exists and is writable (root, or a
    delegated subtree); else None."""
    try:
        with open("/proc/self/cgroup", encoding="utf-8") as f:
            rel = next((ln[3:].strip() for ln in f if ln.startswith("0::")), None)
        with open("/proc/self/mountinfo", encoding="utf-8") as f:
            mounts = [ln.split() for ln in f]
    except OSError:
        return None
    if rel is None:
        return None
    for parts in mounts:
        sep = parts.index("-") if "-" in parts else -1
        if sep > 0 and parts[sep + 1] == "cgroup2":
            root, point = parts[3], parts[4]
            path = os.path.normpath(os.path.join(point, os.path.relpath(rel, root)))
            if os.path.isdir(path) and os.access(path, os.W_OK):
                return path
    return None


@dataclass
class Tree:
    """How one child's process tree is contained (the parent's side)."""

    pid: int
    kind: str  # pidns | cgroup | none
    detail: str
    cgroup: str | None = None
    items: dict[str, dict[str, Any]] = field(default_factory=dict)

    def kill(self) -> None:
        """SIGKILL the child and everything it started (idempotent). Only while the
        child is not yet reaped (running, or a zombie: ``reap`` calls it then): until
        it is reaped its PID, and so its process group's id, cannot be given to
        another process, after that a signal to them could hit a stranger."""
        self._kill_cgroup()
        for kill in (os.killpg, os.kill):  # the child's group; PID 1 takes its namespace along
            try:
                kill(self.pid, 9)
            except OSError:
                pass

    def _kill_cgroup(self) -> None:
        if self.cgroup is not None:  # a path of this run's own: safe at any time
            try:
                with open(os.path.join(self.cgroup, "cgroup.kill"), "w") as f:
                    f.write("1")
            except OSError:
                pass

    def finish(self) -> dict[str, dict[str, Any]]:
        """After the child was reaped (``reap``: its group already killed): empty the
        cgroup, check that nothing is left, and return the ``process_tree`` record.
        Signals nothing by PID."""
        if self.kind == "pidns":
            return {"process_tree": _item(True, self.detail)}
        if self.kind != "cgroup" or self.cgroup is None:
            return {"process_tree": _item(False, self.detail)}
        self._kill_cgroup()
        deadline = time.monotonic() + CGROUP_EMPTY_S
        left: list[str] = []
        while True:
            try:
                os.rmdir(self.cgroup)
                return {"process_tree": _item(True, self.detail + "; emptied and removed")}
            except OSError:
                pass
            try:
                with open(os.path.join(self.cgroup, "cgroup.procs"), encoding="utf-8") as f:
                    left = f.read().split()
            except OSError:
                left = []
            if time.monotonic() > deadline:
                return {
                    "process_tree": _item(
                        False, f"{self.detail}; {len(left)} process(es) survived cgroup.kill"
                    )
                }
            time.sleep(CGROUP_POLL_S)


def reap(pid: int, tree: Tree | None, block: bool = True) -> tuple[int, int, Any] | None:
    """Reap child ``pid`` (-1: any child) once it has exited, its whole tree killed
    first, while the exited child still holds its PID and process group (a zombie):
    (pid, status, rusage), or None when none has exited (``block`` False).
    ``tree``: the child's (None: a child that is not a run's, reaped as it is)."""
    flags = os.WEXITED | os.WNOWAIT | (0 if block else os.WNOHANG)
    idtype = os.P_ALL if pid == -1 else os.P_PID
    info = os.waitid(idtype, max(pid, 0), flags)
    if info is None:
        return None
    if tree is not None:
        tree.kill()
    found, status, rusage = os.wait4(info.si_pid, 0)
    return found, status, rusage


class Trees:
    """Forks children with their process trees contained (see the module docstring).
    ``mode`` forces one way (the tests use it): auto tries pidns, then cgroup."""

    def __init__(self, mode: str = "auto"):
        if mode not in MODES:
            raise ValueError(f"process tree mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.own_pidns: int | None = None
        self.why_not: list[str] = []
        if mode in ("auto", "pidns"):
            try:  # to reset the namespace new children get after each fork
                self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
            except OSError as e:
                self.why_not.append(f"no PID namespace: {e.strerror}")
        self.cgroup = cgroup_base() if mode in ("auto", "cgroup") else None
        if mode in ("auto", "cgroup") and self.cgroup is None:
            self.why_not.append("no writable cgroup v2")

    def _fork_pidns(self) -> int:
        """Fork a child that is PID 1 of a new PID namespace. Raises OSError, having
        forked nothing, if the kernel refuses the namespace."""
        assert self.own_pidns is not None
        check(LIBC.unshare(ctypes.c_int(CLONE_NEWPID)), "unshare(CLONE_NEWPID)")
        pid = -1
        try:
            pid = os.fork()
        finally:
            # The parent: later children may get namespaces of their own again. If it
            # cannot, every later fork would land in this child's namespace and fail
            # once it is gone: better to stop this process, whose owner restarts it.
            if pid != 0 and LIBC.setns(self.own_pidns, CLONE_NEWPID) != 0:
                os._exit(EXIT_BROKEN)
        return pid

    def fork(self) -> Tree:
        """Fork; returns in both processes (``pid`` 0 in the child, which is then inside
        its container already)."""
        why = list(self.why_not)
        if self.own_pidns is not None:
            try:
                pid = self._fork_pidns()
                return Tree(
                    pid,
                    "pidns",
                    "PID 1 of its own PID namespace: when the lab ends, the kernel kills "
                    "every process it started, setsid() daemons included",
                )
            except OSError as e:
                why.append(f"PID namespace refused: {e}")
        if self.cgroup is not None:
            path = os.path.join(self.cgroup, f"lowbit-run-{uuid.uuid4().hex[:12]}")
            try:
                os.mkdir(path)
            except OSError as e:
                why.append(f"cgroup {path}: {e.strerror}")
            else:
                pid = os.fork()
                if pid == 0:
                    try:  # join before anything else runs: its forks land inside too
                        with open(os.path.join(path, "cgroup.procs"), "w") as f:
                            f.write("0")
                    except OSError:
                        os._exit(70)
                prefix = "; ".join(why) + "; " if why else ""
                return Tree(
                    pid,
                    "cgroup",
                    f"{prefix}own cgroup v2 {path}, killed whole (cgroup.kill) when the run ends",
                    cgroup=path,
                )
        pid = os.fork()
        return Tree(
            pid,
            "none",
            "; ".join(why or ["disabled"])
            + ": only the lab's process group is killed; a setsid() daemon can outlive the run",
        )

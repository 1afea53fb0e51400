"""A spare lab child: forked by the fork server while it is idle and sandboxed at once
(its own PID, mount and network namespaces, a fresh ``/proc``, the private ``/tmp``,
every mount read-only, limits, a scrubbed environment, the sandbox user), so the next
run with the same sandbox settings starts in a process that is ready for it.

A spare runs one job and exits, exactly as a child forked for that job would: it is
never handed a second one, and it was forked from the server, which never runs a lab,
so nothing of an earlier run can be in it. It waits on its own control socket for the
job's descriptors (event pipe, output pipe, the memfd with the parameters); the server
hands it a job only when the job's sandbox settings equal the ones the spare applied
and the host looks as it did when the spare hid it (the same unix sockets, the same
hidden paths present). Anything else, and the server kills the spare and forks afresh.
"""

from __future__ import annotations

import dataclasses
import fcntl
import json
import os
import socket
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from labs.base import Lab
from labs.runtime.executor import (
    EXIT_SETUP_FAILED,
    HIGH_FD,
    Job,
    default_signals,
    resource_max_fd,
    run_lab,
    setup_failed,
    stdin_from_devnull,
    stdio,
)
from labs.runtime.limits import SandboxConfig
from labs.runtime.mounts import TMP, unix_socket_paths
from labs.runtime.sandbox import die_with_parent, enter
from labs.runtime.trees import Tree, Trees

# A spare that could not set up its sandbox as a run's child would exits with this;
# the server then stops making spares (runs are forked for their job, as before).
EXIT_NO_SPARE = 75  # EX_TEMPFAIL
JOB_BYTES = 1 << 16  # the control message naming the lab
# fallback_tmp of a spare: none. A spare needs the private /tmp of a mount namespace;
# where there is none, ``enter`` fails on this empty path and the spare exits.
NO_FALLBACK_TMP = ""


def config_key(cfg: Mapping[str, Any] | SandboxConfig) -> str:
    """The sandbox settings as one comparable string."""
    raw = dataclasses.asdict(cfg) if isinstance(cfg, SandboxConfig) else dict(cfg)
    return json.dumps(raw, sort_keys=True)


def host_view(cfg: SandboxConfig) -> tuple[tuple[str, ...], tuple[bool, ...]]:
    """What a sandbox set up now would hide: the host's unix sockets, and which of the
    paths to hide exist."""
    return tuple(unix_socket_paths()), tuple(os.path.exists(p) for p in cfg.hide)


@dataclass
class Spare:
    """The server's side of one spare child."""

    tree: Tree
    ctl: socket.socket
    key: str
    view: tuple[tuple[str, ...], tuple[bool, ...]]

    def fits(self, key: str, cfg: SandboxConfig) -> bool:
        return key == self.key and host_view(cfg) == self.view

    def hand(self, lab_id: str, fds: list[int]) -> bool:
        """Give the spare its job: the lab's id and the job's descriptors. False if the
        spare is gone (then the caller forks afresh)."""
        try:
            socket.send_fds(self.ctl, [json.dumps({"lab": lab_id}).encode()], fds)
        except OSError:
            return False
        finally:
            self.ctl.close()
        return True

    def discard(self) -> None:
        """Kill the spare (the server reaps it like any child)."""
        self.ctl.close()
        self.tree.kill()


def fork_spare(cfg: SandboxConfig, labs: Mapping[str, Lab], trees: Trees) -> Spare:
    """Fork a spare child sandboxed with ``cfg``; returns in the server only."""
    view = host_view(cfg)
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    tree = trees.fork()
    if tree.pid == 0:  # pragma: no cover - measured by its effects (test_sandbox)
        ours.close()
        _spare(theirs, cfg, labs, os.getppid())
    theirs.close()
    return Spare(tree, ours, config_key(cfg), view)


def _spare(ctl: socket.socket, cfg: SandboxConfig, labs: Mapping[str, Lab], ppid: int) -> None:
    """Body of a spare; never returns."""
    code = EXIT_NO_SPARE
    try:
        die_with_parent()
        os.setsid()
        default_signals()
        stdin_from_devnull()
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.dup2(null, 2)
        # Nothing of the server's but the control socket stays open.
        ctl_fd = fcntl.fcntl(ctl.fileno(), fcntl.F_DUPFD, HIGH_FD)
        os.close(ctl.detach())
        os.closerange(3, ctl_fd)
        os.closerange(ctl_fd + 1, resource_max_fd())
        control = socket.socket(fileno=ctl_fd)
        protections, tmpdir = enter(cfg, NO_FALLBACK_TMP, ppid)
        if tmpdir != TMP:
            os._exit(EXIT_NO_SPARE)
        code = EXIT_SETUP_FAILED
        load = _wait_for_job(control, cfg, labs)
        if load is None:
            code = 0  # the server discarded this spare
            return
        code = run_lab(load(), protections, tmpdir, ahead=True)
    except BaseException as e:
        if code == EXIT_SETUP_FAILED:
            setup_failed(e)
    finally:
        os._exit(code)


def _wait_for_job(
    control: socket.socket, cfg: SandboxConfig, labs: Mapping[str, Lab]
) -> Callable[[], Job] | None:
    """Block until the server hands over a job; put its descriptors in place and return
    the job's loader (None: the server closed the socket instead)."""
    try:
        msg, fds, _, _ = socket.recv_fds(control, JOB_BYTES, 3)
    except OSError:
        return None
    if not msg or len(fds) != 3:
        return None
    ev_w, out_w, job_fd = fds
    with os.fdopen(job_fd, "rb") as f:
        body = f.read()
    lab = labs[json.loads(msg)["lab"]]
    stdio(ev_w, out_w)  # closes everything above the event pipe: the control socket too
    control.detach()

    def load() -> Job:
        raw = json.loads(body)
        if config_key(raw["config"]) != config_key(cfg):
            raise RuntimeError("the job's sandbox settings differ from the spare's")
        return Job(lab, lab.params.model_validate(raw["params"]), cfg)

    return load

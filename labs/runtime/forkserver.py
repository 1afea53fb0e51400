"""The lab fork server ("zygote"): the process lab children are forked from.

The worker holds credentials (its settings, a database engine, a queue pool), and a
fork copies the whole address space, so a lab forked from the worker could read
them back from memory. Instead the worker starts this server as a fresh
interpreter (``python -m labs.runtime.forkserver``) with an environment cut to
``SERVER_ENV``: it never reads settings nor opens the database or the queue,
imports torch and the labs once (``warm.preload``), does no tensor work, and forks
one sandboxed child per request.

Protocol, on a ``SOCK_SEQPACKET`` socket pair (one JSON object per message): the
server first sends ``ready`` (its pid, torch, preload failures, the environment it
kept). Each request carries the job (lab id, params, sandbox config, temp dir) and
three descriptors: a per-run socket, and the write ends of the child's event and
output pipes, whose read ends the worker keeps (``executor.execute`` reads them).
On the per-run socket the server answers ``{"pid"}`` or ``{"error"}``; it kills the
child on ``kill`` or when the worker closes the socket, and sends ``{"status",
"rusage", "sandbox"}`` when the child has been reaped. If the worker goes away,
the server kills every child and exits.
"""

from __future__ import annotations

import dataclasses
import errno
import json
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from labs.base import Lab
from labs.runtime.executor import SERVER_LOST, Job, start_child
from labs.runtime.limits import KEEP_ENV, SandboxConfig
from labs.runtime.spare import EXIT_NO_SPARE, Spare, config_key, fork_spare
from labs.runtime.trees import Tree, Trees, reap

log = logging.getLogger("lowbit.forkserver")

# What the server's environment keeps: what the children keep, plus what the
# interpreter needs to find the code. No LOWBIT_* setting, so no credential.
SERVER_ENV = (*KEEP_ENV, "PYTHONPATH", "HOME", "PYTHONHASHSEED", "VIRTUAL_ENV")
REQUEST_BYTES = 1 << 20  # largest request (the params are validated and small)
REPLY_BYTES = 1 << 16
START_TIMEOUT_S = 300.0  # importing torch on a cold disk
REPLY_TIMEOUT_S = 60.0
PR_SET_PDEATHSIG = 1


def server_env() -> dict[str, str]:
    """The fork server's environment: ``SERVER_ENV`` and locale variables only, with
    the directory holding ``labs`` first on ``PYTHONPATH`` (the worker's code)."""
    env = {k: v for k, v in os.environ.items() if k in SERVER_ENV or k.startswith("LC_")}
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _send(sock: socket.socket, msg: dict[str, Any]) -> None:
    try:
        sock.send(json.dumps(msg).encode(), socket.MSG_NOSIGNAL)
    except OSError:
        pass  # the worker side went away; it learns of that itself


# -- the worker's side ------------------------------------------------------


class RemoteChild:
    """A lab child of the fork server, driven over its per-run socket (``Handle``)."""

    def __init__(self, sock: socket.socket, pid: int, items: dict[str, dict[str, Any]]):
        self.sock, self.pid, self.items = sock, pid, items

    def _exited(self, data: bytes) -> tuple[int, Any]:
        if not data:
            return SERVER_LOST, None
        msg = json.loads(data)
        self.items.update(msg.get("sandbox") or {})
        ru = msg.get("rusage")
        return int(msg["status"]), SimpleNamespace(**ru) if ru else None

    def poll(self) -> tuple[int, Any] | None:
        try:
            data = self.sock.recv(REPLY_BYTES, socket.MSG_DONTWAIT)
        except BlockingIOError:
            return None
        except OSError:
            data = b""
        return self._exited(data)

    def wait(self) -> tuple[int, Any]:
        try:
            data = self.sock.recv(REPLY_BYTES)
        except OSError:
            data = b""
        return self._exited(data)

    def kill(self) -> None:
        try:
            self.sock.send(b"kill", socket.MSG_NOSIGNAL)
        except OSError:
            pass

    def close(self) -> None:
        self.sock.close()


class ForkServer:
    """The worker's client of its fork server; a ``Launcher`` for ``execute``.
    Restarts the server if it has died. ``trees`` forces how process trees are
    contained (``trees.MODES``); ``probe_cuda`` lets it count GPUs (through NVML)."""

    def __init__(
        self, lab_modules: Sequence[str] = (), trees: str = "auto", probe_cuda: bool = False
    ):
        self.args = [trees, "1" if probe_cuda else "0", *lab_modules]
        self.lock = threading.Lock()
        self.proc: subprocess.Popen[bytes] | None = None
        self.info: dict[str, Any] = {}
        self._start()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        with theirs:
            self.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [sys.executable, "-m", "labs.runtime.forkserver", str(theirs.fileno()), *self.args],
                env=server_env(),
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
            )
        ours.settimeout(START_TIMEOUT_S)
        data = ours.recv(REPLY_BYTES)
        if not data:
            ours.close()
            raise RuntimeError(f"the lab fork server failed to start (exit {self.proc.wait()})")
        ours.settimeout(None)
        self.sock = ours
        self.info = json.loads(data)

    def secrets(self) -> dict[str, Any]:
        """The ``secrets`` record every child of this server gets."""
        leaked = self.info.get("leaked") or []
        kept = ", ".join(self.info.get("env") or []) or "nothing"
        if leaked:
            return {"enabled": False, "detail": f"the fork server holds {', '.join(leaked)}"}
        return {
            "enabled": True,
            "detail": f"forked from the lab fork server (pid {self.info.get('pid')}), a fresh "
            f"interpreter that never read the worker's settings nor opened the database or "
            f"queue (its environment kept {kept}); inherited file descriptors closed",
        }

    def _request(self, job: Job, fds: list[int], tmp: str) -> None:
        """Ask the server for a child. The control message names only the lab; the
        parameters and sandbox settings travel in a memfd that the child reads after
        the fork, so their size is not limited by the socket and the server never
        holds one run's input while it forks the next."""
        body = json.dumps(
            {"params": job.params.model_dump(mode="json"), "config": dataclasses.asdict(job.config)}
        ).encode()
        job_fd = os.memfd_create("lowbit-job", os.MFD_CLOEXEC)
        try:
            view = memoryview(body)
            while view:
                view = view[os.write(job_fd, view) :]
            os.lseek(job_fd, 0, os.SEEK_SET)
            # The sandbox settings (the worker's, not the learner's) travel here too: the
            # server hands the job to a spare child prepared with the same ones (``spare``).
            config = dataclasses.asdict(job.config)
            msg = json.dumps({"lab": job.lab.id, "tmp": tmp, "config": config}).encode()
            with self.lock:
                for attempt in (0, 1):
                    if self.proc is None or self.proc.poll() is not None:
                        log.warning("lab fork server gone; restarting it")
                        self._start()
                    try:
                        socket.send_fds(self.sock, [msg], [*fds, job_fd])
                        return
                    except OSError as e:
                        # Only a server that went away is restarted; any other error
                        # fails this run alone (it must not end the other runs).
                        if attempt or e.errno not in SERVER_GONE_ERRNOS:
                            raise
                        self.sock.close()
                        if self.proc is not None and self.proc.poll() is None:
                            self.proc.kill()
                            self.proc.wait()
        finally:
            os.close(job_fd)

    def __call__(self, job: Job, ev_w: int, out_w: int, tmp: str) -> RemoteChild:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            with theirs:
                self._request(job, [theirs.fileno(), ev_w, out_w], tmp)
            mine.settimeout(REPLY_TIMEOUT_S)
            reply = json.loads(mine.recv(REPLY_BYTES) or b'{"error": "the fork server stopped"}')
            if "error" in reply:
                raise RuntimeError(f"the lab fork server could not start the lab: {reply['error']}")
            mine.settimeout(None)  # blocking again: a timeout would make poll()'s recv wait
        except BaseException:
            mine.close()
            raise
        return RemoteChild(mine, int(reply["pid"]), {"secrets": self.secrets()})

    def close(self) -> None:
        with self.lock:
            self.sock.close()  # the server kills its children and exits
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()


# -- the server's side --------------------------------------------------------


# A send that fails with one of these means the server went away (restart it).
SERVER_GONE_ERRNOS = frozenset({errno.EPIPE, errno.ECONNRESET, errno.ENOTCONN, errno.EBADF})


def _config(raw: dict[str, Any]) -> SandboxConfig:
    fields: dict[str, Any] = {k: tuple(v) if isinstance(v, list) else v for k, v in raw.items()}
    return SandboxConfig(**fields)


class _Server:
    def __init__(self, sock: socket.socket, labs: dict[str, Lab], trees: Trees):
        self.sock, self.labs, self.trees = sock, labs, trees
        self.runs: dict[int, tuple[socket.socket, Tree]] = {}  # by child pid
        # The spare child (``spare``), made while no run is active, for the sandbox
        # settings of the last request; spares killed unused, until reaped.
        self.spare: Spare | None = None
        self.spare_cfg: SandboxConfig | None = None
        self.spares_work = True
        self.discarded: dict[int, Tree] = {}
        self.sel = selectors.DefaultSelector()
        self.wake_r, wake_w = os.pipe()
        for fd in (self.wake_r, wake_w):
            os.set_blocking(fd, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # wakes select through the fd
        self.sel.register(self.sock, selectors.EVENT_READ)
        self.sel.register(self.wake_r, selectors.EVENT_READ)

    def _spawn(self) -> bool:
        try:
            data, fds, _, _ = socket.recv_fds(self.sock, REQUEST_BYTES, 4)
        except OSError:
            data, fds = b"", []
        if not data:
            return False
        if len(fds) != 4:
            for fd in fds:
                os.close(fd)
            return True
        run_sock = socket.socket(fileno=fds[0])
        job_fd = fds[3]
        try:
            req = json.loads(data)
            lab = self.labs[req["lab"]]

            def load() -> Job:  # runs in the child, after the fork
                with os.fdopen(job_fd, "rb") as f:
                    raw = json.loads(f.read())
                return Job(lab, lab.params.model_validate(raw["params"]), _config(raw["config"]))

            tree = self._from_spare(req, fds[1:]) or start_child(
                load, fds[1], fds[2], req["tmp"], self.trees
            )
        except Exception as e:  # a bad request fails that run, not the server
            _send(run_sock, {"error": f"{type(e).__name__}: {e}"})
            run_sock.close()
            return True
        finally:
            for fd in (fds[1], fds[2], job_fd):
                os.close(fd)
        self.runs[tree.pid] = (run_sock, tree)
        self.sel.register(run_sock, selectors.EVENT_READ, tree.pid)
        _send(run_sock, {"pid": tree.pid})
        return True

    def _reap(self) -> None:
        while True:
            try:  # which child exited, without reaping it yet
                info = os.waitid(os.P_ALL, 0, os.WEXITED | os.WNOHANG | os.WNOWAIT)
            except ChildProcessError:
                return
            if info is None:
                return
            known = self.runs.get(info.si_pid)
            done = reap(info.si_pid, known[1] if known else None)
            assert done is not None
            pid, status, ru = done
            run_sock, tree = self.runs.pop(pid, (None, None))
            if run_sock is None or tree is None:
                self._spare_exited(pid, status)
                continue
            items = tree.finish()
            try:
                self.sel.unregister(run_sock)
            except KeyError:  # the worker had closed its end already
                pass
            rusage = {"ru_utime": ru.ru_utime, "ru_stime": ru.ru_stime, "ru_maxrss": ru.ru_maxrss}
            _send(run_sock, {"status": status, "rusage": rusage, "sandbox": items})
            run_sock.close()

    def serve(self) -> None:
        while True:
            for key, _ in self.sel.select(timeout=1.0):
                if key.fileobj is self.sock:
                    if not self._spawn():
                        self.stop()
                        return
                elif key.fileobj == self.wake_r:
                    while True:
                        try:
                            if not os.read(self.wake_r, 4096):
                                break
                        except BlockingIOError:
                            break
                else:  # "kill", or the worker closed its end: either way the run is over
                    run_sock, tree = self.runs[key.data]
                    try:
                        msg = run_sock.recv(REPLY_BYTES, socket.MSG_DONTWAIT)
                    except OSError:
                        msg = b""
                    tree.kill()
                    if not msg:
                        self.sel.unregister(run_sock)
            self._reap()
            self._make_spare()

    def _from_spare(self, req: dict[str, Any], fds: list[int]) -> Tree | None:
        """The spare, handed this request's job, if it was prepared for the same
        sandbox settings and the host looks as it did then; else None (the spare is
        killed and the caller forks a child for the job)."""
        spare, self.spare = self.spare, None
        cfg = _config(req["config"]) if "config" in req else None
        self.spare_cfg = cfg
        if spare is None:
            return None
        if cfg is not None and spare.fits(config_key(cfg), cfg) and spare.hand(req["lab"], fds):
            return spare.tree
        spare.discard()
        self.discarded[spare.tree.pid] = spare.tree
        return None

    def _make_spare(self) -> None:
        """Fork a spare while no run is active (it would take CPU from one)."""
        if self.spare is not None or self.spare_cfg is None or self.runs or not self.spares_work:
            return
        try:
            self.spare = fork_spare(self.spare_cfg, self.labs, self.trees)
        except OSError as e:
            log.warning("no spare lab child: %s", e)
            self.spares_work = False

    def _spare_exited(self, pid: int, status: int) -> None:
        """A spare exited without a job: discarded, or on its own, which a working one
        never does (it could not set up its sandbox, EXIT_NO_SPARE, or it crashed): then
        no more spares, rather than one forked and lost after every run; every run
        forks its own child, as without them."""
        tree = self.discarded.pop(pid, None)
        if self.spare is not None and self.spare.tree.pid == pid:
            tree = self.spare.tree
            self.spare.ctl.close()
            self.spare = None
            self.spares_work = False
            code = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
            why = "could not set up its sandbox" if code == EXIT_NO_SPARE else "exited"
            log.warning("a spare lab child %s (wait status %d); no more spares", why, status)
        if tree is not None:
            tree.finish()

    def stop(self) -> None:
        if self.spare is not None:
            self.spare.discard()
            self.discarded[self.spare.tree.pid] = self.spare.tree
            self.spare = None
        for pid, tree in self.discarded.items():
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            tree.finish()
        for _, tree in self.runs.values():
            tree.kill()
        for pid in list(self.runs):
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
            self.runs[pid][1].finish()


def main(argv: list[str]) -> int:
    """``python -m labs.runtime.forkserver FD TREES PROBE_CUDA [LAB_MODULE…]``."""
    import ctypes

    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)  # die with the worker
    sock = socket.socket(fileno=int(argv[0]))
    trees_mode, probe_cuda, modules = argv[1], argv[2] == "1", argv[3:]
    from labs.registry import all_labs, load_labs
    from labs.runtime.warm import preload

    failed = preload()
    import torch

    labs = dict(all_labs())
    labs.update(load_labs(modules))
    trees = Trees(trees_mode)
    cuda = torch.cuda.device_count() if probe_cuda and torch.version.cuda else 0
    _send(
        sock,
        {
            "pid": os.getpid(),
            "torch": torch.__version__,
            "torch_cuda": torch.version.cuda,
            "cuda_devices": cuda,
            "preload_failed": failed,
            "env": sorted(os.environ),
            "leaked": sorted(k for k in os.environ if k.startswith("LOWBIT_")),
        },
    )
    _Server(sock, labs, trees).serve()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Bells: wake-ups between the web and worker processes of one host.

A run's stream and an idle worker both poll (the database, the queue), and a poll
interval is latency: a 256×256 block-quantize is over in well under a poll's backoff.
So the side that writes rings a bell: the worker after it stores a run's events or its
end (``streams``), the web after it queues a run (``workers``). Each listening process
binds a unix datagram socket in ``<data_dir>/bells/`` (mode 0700, like the data dir,
which labs never see) named for its role; a ring sends the run id to every socket of
that role. A bell is only a hint to read now: the reader reads the database or the
queue as before, and keeps polling at its old pace for what no bell reaches (a worker
on another host, a process whose socket path is too long to bind).
"""

from __future__ import annotations

import asyncio
import errno
import logging
import os
import secrets
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

log = logging.getLogger("lowbit.bells")

BELLS_DIR = "bells"
STREAMS = "streams"  # rung with a run id when a run has news (events, status)
WORKERS = "workers"  # rung with a run id when a run was queued
MAX_MESSAGE = 256  # a run id
# A ring's send errors that mean nobody listens there any more: the socket file of a
# process that is gone (removed, so later rings skip it).
_GONE = (errno.ECONNREFUSED, errno.ENOENT)


def bells_dir(data_dir: Path) -> Path:
    return data_dir / BELLS_DIR


class Bell:
    """One process's bell for ``role``: a bound, non-blocking datagram socket."""

    def __init__(self, data_dir: Path, role: str):
        d = bells_dir(data_dir)
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.path = d / f"{role}-{os.getpid()}-{secrets.token_hex(3)}"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        try:
            self.sock.bind(str(self.path))
        except OSError:
            self.sock.close()
            raise
        self.sock.setblocking(False)

    def fileno(self) -> int:
        return self.sock.fileno()

    def drain(self) -> list[str]:
        """The run ids rung since the last drain (oldest first, repeats kept)."""
        got: list[str] = []
        while True:
            try:
                data = self.sock.recv(MAX_MESSAGE)
            except (BlockingIOError, OSError):
                return got
            got.append(data.decode(errors="replace"))

    def close(self) -> None:
        self.sock.close()
        try:
            self.path.unlink()
        except OSError:
            pass


def open_bell(data_dir: Path, role: str) -> Bell | None:
    """A bell for ``role``, or None (logged) where none can be bound: polling alone."""
    try:
        return Bell(data_dir, role)
    except OSError as e:
        log.warning("no bell; polling only", extra={"role": role, "error": str(e)})
        return None


class Ringer:
    """Rings every bell of ``role`` in ``data_dir`` (thread-safe, never blocks)."""

    def __init__(self, data_dir: Path, role: str):
        self.dir = bells_dir(data_dir)
        self.prefix = role + "-"
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.setblocking(False)

    def ring(self, run_id: str) -> None:
        try:
            names = [n for n in os.listdir(self.dir) if n.startswith(self.prefix)]
        except OSError:
            return  # no bell was ever bound here
        message = run_id.encode()
        for name in names:
            path = os.path.join(self.dir, name)
            try:
                self.sock.sendto(message, path)
            except OSError as e:  # a full queue (the reader is behind): it polls anyway
                if e.errno in _GONE:
                    try:
                        os.unlink(path)
                    except OSError:
                        pass

    def close(self) -> None:
        self.sock.close()


class RunNews:
    """The web process's ``streams`` bell: a stream waits on it between its polls of a
    run, and wakes as soon as the worker rings for that run."""

    def __init__(self, data_dir: Path):
        self.data_dir = data_dir
        self.bell: Bell | None = None
        self.watchers: dict[str, set[asyncio.Event]] = {}
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Bind the bell and read it on the running event loop."""
        self.bell = open_bell(self.data_dir, STREAMS)
        if self.bell is not None:
            self._loop = asyncio.get_running_loop()
            self._loop.add_reader(self.bell.fileno(), self._rung)

    def stop(self) -> None:
        if self.bell is not None:
            if self._loop is not None:
                self._loop.remove_reader(self.bell.fileno())
            self.bell.close()
            self.bell = None

    def _rung(self) -> None:
        assert self.bell is not None
        for run_id in self.bell.drain():
            for event in self.watchers.get(run_id, ()):
                event.set()

    @contextmanager
    def watch(self, run_id: str) -> Iterator[asyncio.Event]:
        """An event set whenever ``run_id`` is rung (clear it before each poll)."""
        event = asyncio.Event()
        self.watchers.setdefault(run_id, set()).add(event)
        try:
            yield event
        finally:
            waiting = self.watchers.get(run_id)
            if waiting is not None:
                waiting.discard(event)
                if not waiting:
                    del self.watchers[run_id]

"""Private PostgreSQL and Redis servers for the fault tests, which stop and restart
them: the machine's shared services (5432, 6379) are never touched.

PostgreSQL comes from the Debian binaries (``/usr/lib/postgresql/<v>/bin``, or
``LOWBIT_TEST_PG_BIN``); as root, its cluster belongs to the ``postgres`` user.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from tests.conftest import free_port

START_TIMEOUT_S = 30
PG_USER = "postgres"


def _pg_bin() -> Path:
    configured = os.environ.get("LOWBIT_TEST_PG_BIN")
    candidates = [configured] if configured else glob.glob("/usr/lib/postgresql/*/bin")
    found = [Path(c) for c in candidates if c and (Path(c) / "initdb").exists()]
    if not found:
        pytest.fail(
            "the fault tests need PostgreSQL's server binaries (initdb, pg_ctl): "
            "install Debian's postgresql or set LOWBIT_TEST_PG_BIN"
        )
    return max(found, key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0)


class PrivatePostgres:
    """A throw-away cluster on 127.0.0.1:<free port>, trust auth, fsync off."""

    def __init__(self) -> None:
        self.bin = _pg_bin()
        # Not under pytest's 0700 tmp dir: the postgres user must reach it.
        self.dir = Path(tempfile.mkdtemp(prefix="lowbit-pg-"))
        self.data = self.dir / "data"
        self.port = free_port()
        self.as_root = os.geteuid() == 0
        if self.as_root:
            shutil.chown(self.dir, PG_USER, PG_USER)
        self._run(
            "initdb", "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--no-instructions",
        )  # fmt: skip

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin / tool), *args]
        if self.as_root:
            cmd = ["runuser", "-u", PG_USER, "--", *cmd]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.dir)
        if r.returncode:
            raise RuntimeError(f"{tool} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.dir} "
            "-c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        )
        self._run(
            "pg_ctl", "-D", str(self.data), "-l", str(self.dir / "log"), "-o", opts,
            "-w", "-t", str(START_TIMEOUT_S), "start",
        )  # fmt: skip

    def stop(self) -> None:
        """A fast shutdown: open connections are terminated, as in a real restart."""
        self._run("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def close(self) -> None:
        try:
            self.stop()
        except RuntimeError:
            pass  # already stopped
        shutil.rmtree(self.dir, ignore_errors=True)


class PrivateRedis:
    """redis-server on 127.0.0.1:<free port> without persistence: a restart empties it,
    the worst case for the queue."""

    def __init__(self) -> None:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.fail("the fault tests need redis-server")
        self.exe = exe
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        import redis

        self.proc = subprocess.Popen(
            [self.exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning"],
            stdout=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            try:
                redis.Redis(port=self.port, socket_connect_timeout=0.5).ping()
                return
            except redis.RedisError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError("redis-server did not start") from None
                time.sleep(0.05)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(10)
        self.proc = None

    def close(self) -> None:
        self.stop()

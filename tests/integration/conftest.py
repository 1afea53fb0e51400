"""The real stack for lab-run tests: a uvicorn server process and a `lowbit worker`
process on the real queue, once on SQLite + SqliteHuey and once on PostgreSQL +
Redis (the machine's; override with LOWBIT_TEST_POSTGRES_URL / LOWBIT_TEST_REDIS_URL).

Each stack is a session fixture; tests that kill or restart the worker or the
server leave a running one behind.
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import ROOT, Settings
from tests.conftest import free_port
from tests.factories import make_content

POSTGRES_ADMIN_URL = os.environ.get(
    "LOWBIT_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("LOWBIT_TEST_REDIS_URL", "redis://127.0.0.1:6379")
REDIS_DBS = range(1, 16)
START_TIMEOUT_S = 60.0

# Settings of both stacks: a fast heartbeat and a short reaper grace so the
# durability tests finish in seconds.
STACK_SETTINGS = {
    "LOWBIT_ENV": "test",
    "LOWBIT_HEARTBEAT_SECONDS": "0.5",
    "LOWBIT_REAPER_GRACE_SECONDS": "3",
    "LOWBIT_MAX_ATTEMPTS": "2",
    "LOWBIT_MAX_ACTIVE_RUNS": "2",
    "LOWBIT_WORKER_QUEUES": "cpu",
}

SERVER = ["-m", "app.cli", "serve", "--port"]


class Proc:
    """A child process whose output goes to a log file (shown when a test fails)."""

    def __init__(self, name: str, args: list[str], env: dict[str, str], log_dir: Path):
        self.name, self.args, self.env = name, args, env
        self.log_path = log_dir / f"{name}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        log = open(self.log_path, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.args, cwd=ROOT, env={**os.environ, **self.env}, stdout=log, stderr=log
        )
        log.close()

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self, timeout: float = 20.0, signals: int = 1) -> None:
        """SIGTERM (``signals`` times: a worker stops its labs at once on the second)."""
        if self.alive():
            assert self.proc is not None
            for _ in range(signals):
                self.proc.send_signal(signal.SIGTERM)
                time.sleep(0.05)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except OSError:
            return ""


@dataclass
class Stack:
    name: str
    env: dict[str, str]
    settings: Settings
    log_dir: Path
    server: Proc | None = None
    worker: Proc | None = None
    port: int = 0
    _factory: Any = field(default=None, repr=False)
    _queue: Any = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def factory(self) -> Any:
        if self._factory is None:
            from app.db import make_engine, make_sessionmaker

            self._factory = make_sessionmaker(make_engine(self.settings.db_url))
        return self._factory

    @property
    def queue(self) -> Any:
        if self._queue is None:
            from labs.runtime.queue import RunQueue

            self._queue = RunQueue(self.settings)
        return self._queue

    # -- processes --------------------------------------------------------------

    def start_server(self, wait: bool = True) -> None:
        """Start the server (on the same port as before, so clients keep working)."""
        self.port = self.port or free_port()
        self.server = Proc(
            "server", [sys.executable, *SERVER, str(self.port)], self.env, self.log_dir
        )
        self.server.start()
        if wait:
            self.wait_server()

    def wait_server(self) -> None:
        wait_for(
            lambda: _healthy(self.url),
            START_TIMEOUT_S,
            lambda: "server did not start:\n" + self.server.tail(),
        )  # type: ignore[union-attr]

    def start_worker(self, wait: bool = True) -> None:
        """Start `lowbit worker`; with ``wait``, until it has registered itself."""
        self.worker = Proc(
            "worker", [sys.executable, "-m", "app.cli", "worker"], self.env, self.log_dir
        )
        self.worker.start()
        if wait:
            self.wait_worker()

    def wait_worker(self) -> None:
        assert self.worker is not None
        pid = self.worker.pid
        wait_for(
            lambda: self._worker_up(pid),
            START_TIMEOUT_S,
            lambda: "worker did not start:\n" + self.worker.tail(),
        )  # type: ignore[union-attr]

    def _worker_up(self, pid: int) -> bool:
        from sqlalchemy import select

        from app.db import Worker

        assert self.worker is not None
        if not self.worker.alive():
            raise RuntimeError("worker exited:\n" + self.worker.tail())
        with self.factory() as s:
            return (
                s.scalar(select(Worker.id).where(Worker.pid == pid, Worker.status == "up"))
                is not None
            )

    def ensure_running(self) -> None:
        """Start whatever is not running, both at once (each takes seconds)."""
        server = self.server is None or not self.server.alive()
        worker = self.worker is None or not self.worker.alive()
        if server:
            self.start_server(wait=False)
        if worker:
            self.start_worker(wait=False)
        if server:
            self.wait_server()
        if worker:
            self.wait_worker()

    def learner(self) -> httpx.Client:
        """A new learner: a client with its own session cookie and the CSRF header set."""
        c = httpx.Client(base_url=self.url, timeout=30)
        c.get("/healthz").raise_for_status()
        c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
        return c

    def run_row(self, run_id: str) -> Any:
        from app.db import Run

        with self.factory() as s:
            return s.get(Run, run_id)


def _healthy(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_for(
    check: Callable[[], Any],
    timeout: float,
    message: Callable[[], str] | str = "timed out",
    every: float = 0.1,
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(message() if callable(message) else message)


def wait_final(client: httpx.Client, run_id: str, timeout: float = 60) -> dict[str, Any]:
    """Poll the API until the run has ended; returns its JSON."""

    def done() -> dict[str, Any] | None:
        body = client.get(f"/api/runs/{run_id}").json()
        return body if body["status"] in ("succeeded", "failed", "timed_out", "cancelled") else None

    return wait_for(done, timeout, f"run {run_id} did not finish in {timeout} s", every=0.1)


def start(client: httpx.Client, lab: str, params: dict[str, Any] | None = None) -> str:
    r = client.post(f"/api/labs/{lab}/runs", json=params or {})
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def _postgres_database(name: str) -> tuple[str, Callable[[], None]]:
    from sqlalchemy import create_engine, text
    from sqlalchemy.engine import make_url

    admin = create_engine(POSTGRES_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as c:
            c.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as e:
        pytest.fail(
            f"PostgreSQL at {POSTGRES_ADMIN_URL} is needed for the postgres+redis stack: {e}"
        )

    def drop() -> None:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return make_url(POSTGRES_ADMIN_URL).set(database=name).render_as_string(
        hide_password=False
    ), drop


def _redis_database() -> tuple[str, Callable[[], None]]:
    import redis

    for db in REDIS_DBS:
        url = f"{REDIS_URL.rstrip('/')}/{db}"
        try:
            r = redis.Redis.from_url(url)
            if r.dbsize() == 0 and r.set("lowbit-test-lock", "1", nx=True):
                return url, lambda: None if r.flushdb() else None
        except redis.RedisError as e:
            pytest.fail(f"Redis at {REDIS_URL} is needed for the postgres+redis stack: {e}")
    pytest.fail("no empty Redis database (1-15) for the tests")


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    from app.migrate import upgrade

    root = tmp_path_factory.mktemp(f"stack-{request.param}")
    env = {
        **STACK_SETTINGS,
        "LOWBIT_DATA_DIR": str(root / "data"),
        "LOWBIT_CONTENT_DIR": str(make_content(root)),
        "LOWBIT_SECRET_KEY": "test-secret-" + secrets.token_hex(16),
    }
    cleanups: list[Callable[[], None]] = []
    if request.param == "postgres":
        env["LOWBIT_DATABASE_URL"], drop = _postgres_database(f"lowbit_test_{secrets.token_hex(4)}")
        env["LOWBIT_QUEUE_URL"], flush = _redis_database()
        cleanups += [drop, flush]
    settings = Settings(**{k.removeprefix("LOWBIT_").lower(): v for k, v in env.items()})  # type: ignore[arg-type]
    settings.data_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    s = Stack(request.param, env, settings, root)
    try:
        s.ensure_running()
        yield s
    finally:
        for p in (s.worker, s.server):
            if p is not None:
                p.stop()
        if s._factory is not None:
            s._factory.kw["bind"].dispose()
        for c in cleanups:
            c()


@pytest.fixture
def live(stack: Stack) -> Stack:
    """The stack with its server and worker running (restarted if a test stopped them)."""
    stack.ensure_running()
    return stack

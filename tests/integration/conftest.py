"""The real stack for lab-run tests: a uvicorn server process and `lowbit worker`
processes on the real queue, once on SQLite + SqliteHuey (one worker) and once on
PostgreSQL + Redis with two workers (the machine's services; override with
LOWBIT_TEST_POSTGRES_URL / LOWBIT_TEST_REDIS_URL). ``open_stack`` builds others
(the fault tests' private PostgreSQL and Redis, a data dir on a tiny tmpfs).

Each stack is a session fixture; tests that kill or restart the worker or the
server leave a running one behind.
"""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

from app.settings import ROOT, Settings
from tests.conftest import TEST_LAB_MODULES, free_port
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
    "LOWBIT_EXTRA_LAB_MODULES": TEST_LAB_MODULES,  # the sandbox probes
    # The judge's test exercise (judge-echo), which the escape tests submit to.
    "LOWBIT_EXTRA_EXERCISE_CONTENT": str(ROOT / "tests" / "fixtures" / "judge"),
    "LOWBIT_HEARTBEAT_SECONDS": "0.5",
    "LOWBIT_REAPER_GRACE_SECONDS": "3",
    "LOWBIT_MAX_ATTEMPTS": "2",
    "LOWBIT_MAX_ACTIVE_RUNS": "2",
    "LOWBIT_WORKER_QUEUES": "cpu",
    # Every test client comes from 127.0.0.1: the per-client limits get their own
    # stack with the defaults (test_sessions_limits.py).
    "LOWBIT_ANONYMOUS_RUNS_PER_IP_PER_MINUTE": "100000",
    "LOWBIT_NEW_LEARNERS_PER_IP_PER_MINUTE": "100000",
    "LOWBIT_LOGIN_ATTEMPTS_PER_IP_PER_MINUTE": "100000",
}

SERVER = ["-m", "app.cli", "serve", "--port"]
WORKER = ["-m", "app.cli", "worker"]


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
    port: int = 0
    n_workers: int = 1
    workers: list[Proc | None] = field(default_factory=list)
    _factory: Any = field(default=None, repr=False)
    _queue: Any = field(default=None, repr=False)

    @property
    def worker(self) -> Proc | None:
        """The first worker (the one tests stop, kill and restart by default)."""
        return self.workers[0] if self.workers else None

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
            from app.runs.queue import RunQueue

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
        server = self.server
        assert server is not None
        wait_for(
            lambda: _healthy(self.url),
            START_TIMEOUT_S,
            lambda: "server did not start:\n" + server.tail(),
        )

    def start_worker(self, wait: bool = True, index: int = 0) -> Proc:
        """Start `lowbit worker` number ``index``; with ``wait``, until it has registered."""
        proc = Proc(
            "worker" if index == 0 else f"worker{index}",
            [sys.executable, *WORKER],
            self.env,
            self.log_dir,
        )
        while len(self.workers) <= index:
            self.workers.append(None)
        self.workers[index] = proc
        proc.start()
        if wait:
            self.wait_worker(proc)
        return proc

    def wait_worker(self, proc: Proc | None = None) -> None:
        proc = proc or self.worker
        assert proc is not None
        wait_for(
            lambda: self._worker_up(proc),
            START_TIMEOUT_S,
            lambda: "worker did not start:\n" + proc.tail(),
        )

    def _worker_up(self, proc: Proc) -> bool:
        from sqlalchemy import select

        from app.db import Worker

        if not proc.alive():
            raise RuntimeError("worker exited:\n" + proc.tail())
        with self.factory() as s:
            return (
                s.scalar(select(Worker.id).where(Worker.pid == proc.pid, Worker.status == "up"))
                is not None
            )

    def worker_of(self, run_id: str) -> Proc:
        """The worker process that holds ``run_id`` now."""
        row = self.run_row(run_id)
        assert row.worker_id, f"run {run_id} has no worker ({row.status})"
        pid = int(row.worker_id.split(":")[1])
        for p in self.workers:
            if p is not None and p.alive() and p.pid == pid:
                return p
        raise AssertionError(f"no worker process of this stack has pid {pid}")

    def stop_workers(self, first: int = 0) -> None:
        """Stop workers ``first``… (SIGTERM: each finishes or hands back its run)."""
        for p in self.workers[first:]:
            if p is not None:
                p.stop()

    def ensure_running(self, workers: int | None = None) -> None:
        """Start whatever is not running, all at once (each takes seconds): the server
        and the first ``workers`` workers (all of them by default)."""
        server = self.server is None or not self.server.alive()
        if server:
            self.start_server(wait=False)
        started = [
            self.start_worker(wait=False, index=i)
            for i in range(self.n_workers if workers is None else workers)
            if i >= len(self.workers) or self.workers[i] is None or not self.workers[i].alive()  # type: ignore[union-attr]
        ]
        if server:
            self.wait_server()
        for proc in started:
            self.wait_worker(proc)

    def stop(self) -> None:
        for p in (*self.workers, self.server):
            if p is not None:
                p.stop()
        if self._factory is not None:
            self._factory.kw["bind"].dispose()
            self._factory = None

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


def setting_default(env_key: str) -> str:
    """The default of the setting an environment variable sets (``LOWBIT_PORT`` → "8000")."""
    return str(Settings.model_fields[env_key.removeprefix("LOWBIT_").lower()].default)


def default_stack_env(*keep: str) -> dict[str, str]:
    """STACK_SETTINGS with every value back at its default, except ``LOWBIT_ENV`` and the
    keys in ``keep``: a stack that runs with the default settings (limits included)."""
    kept = {"LOWBIT_ENV", *keep}
    return {k: setting_default(k) for k in STACK_SETTINGS if k not in kept}


def run_async(coro: Any) -> Any:
    """``asyncio.run(coro)`` in a thread of its own: the browser tests' Playwright may
    hold this thread's event loop."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def start(client: httpx.Client, lab: str, params: dict[str, Any] | None = None) -> str:
    r = client.post(f"/api/labs/{lab}/runs", json=params or {})
    assert r.status_code == 202, r.text
    return str(r.json()["id"])


def read_sse(
    client: httpx.Client,
    path: str,
    headers: dict[str, str] | None = None,
    until: Callable[[str, Any], bool] | None = None,
) -> list[tuple[str, str | None, Any]]:
    """(event, id, data) for every event of a stream, until it ends (or, with ``until``,
    up to the first event for which ``until(event, data)`` is true)."""
    out: list[tuple[str, str | None, Any]] = []
    with client.stream("GET", path, headers=headers or {}, timeout=60) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        event, eid, data = "message", None, []
        for line in r.iter_lines():
            if line.startswith("event: "):
                event = line[7:]
            elif line.startswith("id: "):
                eid = line[4:]
            elif line.startswith("data: "):
                data.append(line[6:])
            elif line == "" and data:
                text = "\n".join(data)
                try:
                    payload: Any = json.loads(text)
                except ValueError:
                    payload = text
                out.append((event, eid, payload))
                if until is not None and until(event, payload):
                    break
                event, eid, data = "message", None, []
    return out


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


# Worker processes per stack: the PostgreSQL + Redis stack is the many-worker
# topology, so it runs two (they compete for the same queue and database).
WORKERS = {"sqlite": 1, "postgres": 2}


@contextmanager
def open_stack(
    name: str,
    root: Path,
    env: dict[str, str] | None = None,
    n_workers: int = 1,
    start: bool = True,
) -> Iterator[Stack]:
    """A migrated stack under ``root`` (SQLite + SqliteHuey unless ``env`` names a
    database and a queue); its processes are stopped on exit."""
    from app.migrate import upgrade

    env = {
        **STACK_SETTINGS,
        "LOWBIT_DATA_DIR": str(root / "data"),
        "LOWBIT_CONTENT_DIR": str(make_content(root)),
        "LOWBIT_SECRET_KEY": "test-secret-" + secrets.token_hex(16),
        **(env or {}),
    }
    settings = Settings(**{k.removeprefix("LOWBIT_").lower(): v for k, v in env.items()})  # type: ignore[arg-type]
    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)
    s = Stack(name, env, settings, root, n_workers=n_workers)
    try:
        if start:
            s.ensure_running()
        yield s
    finally:
        s.stop()


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def stack(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    root = tmp_path_factory.mktemp(f"stack-{request.param}")
    env: dict[str, str] = {}
    cleanups: list[Callable[[], None]] = []
    if request.param == "postgres":
        env["LOWBIT_DATABASE_URL"], drop = _postgres_database(f"lowbit_test_{secrets.token_hex(4)}")
        env["LOWBIT_QUEUE_URL"], flush = _redis_database()
        cleanups += [drop, flush]
    try:
        with open_stack(request.param, root, env, WORKERS[request.param]) as s:
            yield s
    finally:
        for c in cleanups:
            c()


@pytest.fixture
def live(stack: Stack) -> Stack:
    """The stack with its server and worker running (restarted if a test stopped them)."""
    stack.ensure_running()
    return stack


@pytest.fixture
def one_worker(stack: Stack) -> Stack:
    """The stack with its server and only its first worker running: the others are
    stopped and stay stopped for the next test that asks for one worker (starting a
    worker takes seconds; restarting one before each such test and stopping it again
    was half a minute of test_fairness)."""
    stack.ensure_running(workers=1)
    stack.stop_workers(first=1)
    return stack

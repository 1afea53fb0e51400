"""The compose proxy, run: Debian's nginx with ``deploy/nginx.conf`` in front of
two ``lowbit serve`` replicas on PostgreSQL + Redis and a worker, as in
``compose.yaml``.

The config is used as written; only the lines marked in it change (the replicas'
addresses for Docker's "web", the listen address, and /tmp for a private
directory), and the test fails if those marks move, so it cannot drift into
testing some other config. ``make nginx`` unpacks the nginx binary into the venv.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette

from app.middleware import LowbitMiddleware
from app.settings import ROOT
from tests.conftest import free_port
from tests.integration.conftest import (
    SERVER,
    Proc,
    Stack,
    _healthy,
    _postgres_database,
    _redis_database,
    open_stack,
    read_sse,
    start,
    wait_final,
    wait_for,
)
from tests.integration.rawhttp import send_whole_body_then_read

pytestmark = pytest.mark.postgres

NGINX = Path(os.environ.get("LOWBIT_TEST_NGINX", ROOT / ".venv/nginx/usr/sbin/nginx"))
CONFIG = ROOT / "deploy/nginx.conf"
REQUEST_ID = re.compile(r"^[0-9a-f]{32}$")
# How long nginx leaves a replica out after a failed attempt (its fail_timeout).
FAIL_TIMEOUT_S = int(re.findall(r"fail_timeout=(\d+)s", CONFIG.read_text())[0])
SMALL = {"format": "nvfp4", "shape": [32, 32], "seed": 1}


def render_config(upstreams: list[str], listen: str, tmp: str) -> str:
    """``deploy/nginx.conf`` with the replicas' addresses, a listen address and a
    private temp directory; every other line as written."""
    text = CONFIG.read_text()
    out: list[str] = []
    marks = Counter[str]()
    for line in text.splitlines():
        if "# upstream servers" in line:
            marks["upstream"] += 1
            out += [line.replace("web:8000", u) for u in upstreams]
        elif "# listen" in line:
            marks["listen"] += 1
            out.append(re.sub(r"listen \d+;", f"listen {listen};", line))
        else:
            out.append(line)
    assert marks == {"upstream": 1, "listen": 1}, f"the marked lines moved: {marks}"
    assert "web:8000" in text and "listen 8080;" in text
    rendered = "\n".join(out).replace("/tmp/", tmp + "/")
    assert "web:8000" not in rendered
    return rendered


class Nginx:
    def __init__(self, conf_dir: Path, log_dir: Path) -> None:
        self.conf = conf_dir / "nginx.conf"
        self.log = log_dir / "nginx.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def args(self, *extra: str) -> list[str]:
        return [str(NGINX), "-p", str(self.conf.parent), "-c", str(self.conf), *extra]

    def start(self) -> None:
        log = open(self.log, "ab")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            self.args("-g", "daemon off;"), stdout=log, stderr=subprocess.STDOUT
        )
        log.close()

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def access(self) -> list[dict[str, Any]]:
        """The proxy's JSON access log lines so far."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [json.loads(x) for x in lines if x.startswith("{")]


@dataclass
class Proxied:
    stack: Stack
    replicas: list[Proc]
    ports: list[int]
    nginx: Nginx
    url: str
    listen: str
    tmp: str

    def configure(self, ports: list[int]) -> None:
        """Rewrite the proxy's config for these replicas and reload it (the
        documented step after scaling)."""
        upstreams = [f"127.0.0.1:{p}" for p in ports]
        self.nginx.conf.write_text(render_config(upstreams, self.listen, self.tmp))
        reload = subprocess.run(self.nginx.args("-s", "reload"), capture_output=True, text=True)
        assert reload.returncode == 0, reload.stderr

    def learner(self) -> httpx.Client:
        c = httpx.Client(base_url=self.url, timeout=30)
        c.get("/healthz").raise_for_status()
        c.headers["X-CSRF-Token"] = c.cookies["lowbit_csrf"]
        return c

    def replica_requests(self, index: int) -> dict[str, dict[str, Any]]:
        """Request log lines of replica ``index``, by request id."""
        lines = self.replicas[index].tail(10**8).splitlines()
        rows = [json.loads(x) for x in lines if x.startswith("{")]
        return {r["request_id"]: r for r in rows if r.get("msg") == "request"}

    def restart_replica(self, index: int) -> None:
        self.replicas[index].start()
        wait_replica(self.replicas[index], self.ports[index])


def start_replica(stack: Stack, name: str, port: int) -> Proc:
    """Another `lowbit serve` of ``stack`` on ``port``, started and answering."""
    proc = Proc(name, [sys.executable, *SERVER, str(port)], stack.env, stack.log_dir)
    proc.start()
    wait_replica(proc, port)
    return proc


def wait_replica(proc: Proc, port: int) -> None:
    url = f"http://127.0.0.1:{port}"
    wait_for(lambda: _healthy(url), 60, lambda: f"{proc.name} did not start:\n" + proc.tail())


@pytest.fixture(scope="module")
def proxied(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Proxied]:
    if not NGINX.exists():
        pytest.fail(f"nginx is needed for the proxy test: run `make nginx` ({NGINX} is missing)")
    root = tmp_path_factory.mktemp("proxy")
    db_url, drop = _postgres_database(f"lowbit_test_{secrets.token_hex(4)}")
    queue_url, flush = _redis_database()
    # nginx's workers run as nobody: their temp files go in a world-writable dir.
    tmp = tempfile.mkdtemp(prefix="lowbit-nginx-")
    os.chmod(tmp, 0o1777)
    nginx: Nginx | None = None
    try:
        env = {"LOWBIT_DATABASE_URL": db_url, "LOWBIT_QUEUE_URL": queue_url}
        with open_stack("proxy", root, env, n_workers=1) as s:
            assert s.server is not None
            second_port = free_port()
            second = start_replica(s, "server2", second_port)
            try:
                ports = [s.port, second_port]
                listen = free_port()
                conf_dir = root / "nginx"
                conf_dir.mkdir()
                (conf_dir / "nginx.conf").write_text(
                    render_config([f"127.0.0.1:{p}" for p in ports], f"127.0.0.1:{listen}", tmp)
                )
                nginx = Nginx(conf_dir, root)
                check = subprocess.run(nginx.args("-t"), capture_output=True, text=True)
                assert check.returncode == 0, check.stderr
                nginx.start()
                url = f"http://127.0.0.1:{listen}"
                wait_for(lambda: _healthy(url), 20, lambda: nginx.log.read_text() if nginx else "")
                yield Proxied(s, [s.server, second], ports, nginx, url, f"127.0.0.1:{listen}", tmp)
            finally:
                if nginx is not None:
                    nginx.stop()
                second.stop()
    finally:
        flush()
        drop()


@pytest.fixture
def up(proxied: Proxied) -> Proxied:
    """Both replicas, the worker and the proxy running (a test may have stopped one)."""
    for i, proc in enumerate(proxied.replicas):
        if not proc.alive():
            proxied.restart_replica(i)
    proxied.stack.ensure_running()
    return proxied


def upstream_ports(lines: list[dict[str, Any]]) -> Counter[int]:
    """Which replica answered each proxied request (the last address tried)."""
    return Counter(int(x["upstream"].split(", ")[-1].rsplit(":", 1)[1]) for x in lines)


def test_requests_spread_over_both_replicas_with_one_request_id(up: Proxied) -> None:
    c = httpx.Client(base_url=up.url, timeout=30)
    seen: list[str] = []
    for path in ["/", "/terms", "/lessons", "/search?q=nvfp4", "/healthz"] * 4:
        r = c.get(path, headers={"X-Request-Id": "forged-by-the-client"})
        assert r.status_code == 200, (path, r.text[:300])
        rid = r.headers["x-request-id"]
        assert REQUEST_ID.match(rid), rid  # nginx's id replaces the client's
        seen.append(rid)
    assert len(set(seen)) == len(seen)
    # nginx writes a request's log line just after the response: wait for the last.
    wait_for(lambda: seen[-1] in {x["request_id"] for x in up.nginx.access()}, 5, "no log line")
    lines = [x for x in up.nginx.access() if x["request_id"] in set(seen)]
    assert sorted(x["request_id"] for x in lines) == sorted(seen)
    served = upstream_ports(lines)
    assert set(served) == set(up.ports), served
    # The replica that answered logged the same id the proxy logged and returned.
    # (Each replica, too, logs a request once its response has gone.)
    wait_for(
        lambda: set(seen) <= {*up.replica_requests(0), *up.replica_requests(1)}, 5, "no app log"
    )
    for line in lines:
        index = up.ports.index(upstream_ports([line]).most_common(1)[0][0])
        logged = up.replica_requests(index).get(line["request_id"])
        assert logged is not None, line
        assert logged["path"] == line["uri"].split("?")[0]


def test_headers_pass_through_and_the_proxy_hides_its_version(up: Proxied) -> None:
    r = httpx.get(up.url + "/", timeout=30)
    assert r.status_code == 200
    assert "default-src" in r.headers["content-security-policy"]
    assert r.headers["x-content-type-options"] == "nosniff"
    assert "lowbit_csrf" in r.headers.get("set-cookie", "")
    assert re.search(r"\d", r.headers.get("server", "")) is None, r.headers.get("server")


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_client_that_sends_a_40_mib_body_before_reading_gets_the_413(
    up: Proxied, chunked: bool
) -> None:
    """Through the proxy too a browser uploading too much sees the 413, not a reset:
    nginx refuses over its client_max_body_size and lingers while the rest arrives."""
    answer = send_whole_body_then_read(
        up.url, "/api/labs/block-quantize/runs", 40 * 1_048_576, chunked=chunked
    )
    assert answer.status == 413, answer
    app_message = LowbitMiddleware(Starlette(), up.stack.settings)._too_large()
    assert json.loads(answer.body) == {"detail": app_message}
    assert httpx.get(up.url + "/healthz", timeout=5).status_code == 200


def test_session_and_csrf_from_one_replica_work_on_the_other(up: Proxied) -> None:
    a, b = (f"http://127.0.0.1:{p}" for p in up.ports)
    learner = httpx.Client(base_url=a, timeout=30)
    learner.get("/healthz").raise_for_status()
    learner.headers["X-CSRF-Token"] = learner.cookies["lowbit_csrf"]
    run_id = start(learner, "block-quantize", SMALL)  # on replica a
    learner.base_url = httpx.URL(b)
    assert learner.get(f"/api/runs/{run_id}").status_code == 200  # replica b knows the learner
    assert wait_final(learner, run_id)["status"] == "succeeded"
    # Through the proxy the same cookies keep working whichever replica answers.
    learner.base_url = httpx.URL(up.url)
    for _ in range(6):
        assert learner.get(f"/api/runs/{run_id}").json()["status"] == "succeeded"
    # Another learner through the proxy still cannot see it.
    assert up.learner().get(f"/api/runs/{run_id}").status_code == 404


def read_events(
    lines: Iterator[str], until: Callable[[str, str], bool], timeout: float
) -> list[tuple[str, str]]:
    """(event, data) pairs from an SSE line iterator, up to the first ``until``."""
    got: list[tuple[str, str]] = []
    event, data = "message", list[str]()
    deadline = time.monotonic() + timeout
    for line in lines:
        assert time.monotonic() < deadline, f"no matching event in {timeout} s: {got}"
        if line.startswith("event:"):
            event = line.split(":", 1)[1].strip()
        elif line.startswith("data:"):
            # As a browser does: every data line of the event, joined by newlines (an
            # HTML fragment spans many, its last one may be blank).
            data.append(line.split(":", 1)[1].removeprefix(" "))
        elif line == "" and data:
            text = "\n".join(data).strip()
            got.append((event, text))
            if until(event, text):
                return got
            event, data = "message", []
    raise AssertionError(f"the stream ended first: {got}")


def test_the_stream_location_covers_every_event_stream_route() -> None:
    """The unbuffered, long-read location must match each route of the app that
    answers with an event stream, and nothing else: a new stream route that it
    misses would be cut by the default 60 s read timeout."""
    from typing import get_type_hints

    from fastapi.responses import StreamingResponse

    from app.main import create_app
    from app.runs.live import SSE_KEEPALIVE_S
    from tests.inprocess import app_routes

    text = CONFIG.read_text()
    found = re.search(r"location ~ (\S+) \{([^}]*)\}", text)
    assert found, "no regex location in deploy/nginx.conf"
    pattern, block = re.compile(found.group(1)), found.group(2)
    assert "proxy_buffering off;" in block
    timeout = re.search(r"proxy_read_timeout (\d+)([smh]);", block)
    assert timeout is not None
    seconds = int(timeout.group(1)) * {"s": 1, "m": 60, "h": 3600}[timeout.group(2)]
    assert seconds > 2 * SSE_KEEPALIVE_S
    streams: list[str] = []
    others: list[str] = []
    for path, route in app_routes(create_app()):
        endpoint = getattr(route, "endpoint", None)
        if endpoint is None or "GET" not in getattr(route, "methods", ()):
            continue
        sample = re.sub(r"\{[^}]+\}", "0b5d2c", path)
        hints = get_type_hints(endpoint)
        is_stream = hints.get("return") is StreamingResponse
        (streams if is_stream else others).append(sample)
    assert len(streams) >= 2, streams
    assert [p for p in streams if not pattern.fullmatch(p)] == []
    assert [p for p in others if pattern.fullmatch(p)] == []


@pytest.mark.parametrize("stream", ["/api/runs/{id}/events", "/runs/{id}/stream"])
def test_event_streams_arrive_live_through_the_proxy(up: Proxied, stream: str) -> None:
    """With no worker the run waits: its "queued" status must reach the learner
    through the proxy while the stream stays open. Then a worker starts and the
    rest follows live; a reconnect with Last-Event-ID (to whichever replica the
    proxy picks) resumes after that event."""
    up.stack.stop_workers()
    learner = up.learner()
    run_id = start(learner, "block-quantize", SMALL)
    with learner.stream("GET", stream.format(id=run_id), timeout=httpx.Timeout(30)) as r:
        assert r.status_code == 200
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = r.iter_lines()
        first = read_events(lines, lambda e, d: e == "status", timeout=10)
        assert "queued" in first[-1][1].lower()
        assert up.stack.run_row(run_id).status == "queued"  # still open, still waiting
        up.stack.ensure_running()
        rest = read_events(lines, lambda e, d: e == "end", timeout=60)
    assert "succeeded" in rest[-1][1]
    kinds = {e for e, _ in rest}
    assert kinds & {"log", "result", "output"}, kinds
    if stream.startswith("/api/"):
        path = stream.format(id=run_id)
        ids = [i for _, i, _ in read_sse(learner, path) if i]
        assert len(ids) >= 3
        resumed = read_sse(learner, path, {"Last-Event-ID": ids[1]})
        assert [i for _, i, _ in resumed if i] == ids[2:]


def runs_of(stack: Stack, learner_id: Any) -> list[str]:
    from sqlalchemy import select

    from app.db import Run

    with stack.factory() as s:
        return list(s.scalars(select(Run.id).where(Run.learner_id == learner_id)))


def test_a_replica_down_costs_no_request_and_no_double_runs(up: Proxied) -> None:
    learners = [up.learner() for _ in range(4)]  # sessions made while both are up
    dead = up.ports[1]
    up.replicas[1].kill9()
    try:
        # POSTs first, before anything marks the dead replica failed: a refused
        # connection sent nothing, so nginx moves the POST to the live replica, and
        # each click starts exactly one run.
        ids = [start(lr, "block-quantize", SMALL) for lr in learners]
        for lr, run_id in zip(learners, ids, strict=True):
            assert wait_final(lr, run_id)["status"] == "succeeded"
            assert runs_of(up.stack, up.stack.run_row(run_id).learner_id) == [run_id]
        c = httpx.Client(base_url=up.url, timeout=30)
        for _ in range(12):
            r = c.get("/terms")
            assert r.status_code == 200, r.text[:300]
        wait_for(lambda: len(posts_logged(up)) >= len(ids), 5, "no log lines for the POSTs")
        moved = [x for x in posts_logged(up)[-len(ids) :] if str(dead) in x["upstream"]]
        assert moved, "no POST went to the dead replica first: the test proved nothing"
        for x in moved:
            assert x["upstream_status"].replace(" ", "") == "502,202", x
    finally:
        up.restart_replica(1)
    # Back in rotation once its fail_timeout has passed: no restart of the proxy.
    before = len(up.nginx.access())
    c = httpx.Client(base_url=up.url, timeout=30)

    def both_serve() -> bool:
        assert c.get("/healthz").status_code == 200
        return set(upstream_ports(up.nginx.access()[before:])) == set(up.ports)

    wait_for(both_serve, 30, lambda: "the restarted replica never came back into rotation")


def posts_logged(up: Proxied) -> list[dict[str, Any]]:
    return [x for x in up.nginx.access() if x["method"] == "POST"]


class Stub:
    """Listens on a dead replica's port: ``close`` reads a request and hangs up
    without answering; ``busy`` answers every request with the app's 503."""

    def __init__(self, port: int, mode: str) -> None:
        self.sock = socket.create_server(("127.0.0.1", port), reuse_port=False)
        self.sock.settimeout(0.2)
        self.mode, self.requests = mode, 0
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(2)
                data = b""
                try:
                    while b"\r\n\r\n" not in data:
                        chunk = conn.recv(65536)
                        if not chunk:
                            break
                        data += chunk
                except TimeoutError:
                    continue
                if not data:
                    continue
                self.requests += 1
                if self.mode == "busy":
                    body = b'{"detail": "The database is unavailable; try again shortly."}'
                    conn.sendall(
                        b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 5\r\n"
                        b"Content-Type: application/json\r\nConnection: close\r\n"
                        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
                    )

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(5)
        self.sock.close()


def count_runs(stack: Stack) -> int:
    from sqlalchemy import func, select

    from app.db import Run

    with stack.factory() as s:
        return int(s.scalar(select(func.count()).select_from(Run)) or 0)


def test_retries_only_what_no_replica_received_and_503s_pass_through(up: Proxied) -> None:
    """A replica that takes a request and dies (here: a stub on its port that reads
    the request and hangs up): a POST is not retried (the learner gets a 502 and no
    run is made twice, or at all), a GET is retried on the other replica. A replica
    that answers 503 (its database is down): the learner gets that 503 with
    Retry-After, not a retry and not nginx's own 502."""
    learners = [up.learner() for _ in range(6)]
    port = up.ports[1]
    up.replicas[1].kill9()
    stub = Stub(port, "close")
    try:
        runs_before = count_runs(up.stack)
        got = [lr.post("/api/labs/block-quantize/runs", json=SMALL) for lr in learners]
        codes = [r.status_code for r in got]
        assert stub.requests >= 1 and set(codes) == {202, 502}, codes
        # Each 502 reached the stub only: the live replica made no run for it.
        assert count_runs(up.stack) - runs_before == codes.count(202)
        # The stub's hang-ups keep it out of rotation for fail_timeout (whole seconds
        # of nginx's clock): GET until one reaches it again. Every GET answers 200.
        before = stub.requests
        c = httpx.Client(base_url=up.url, timeout=30)

        def a_get_was_retried() -> bool:
            assert c.get("/terms").status_code == 200
            return stub.requests > before

        wait_for(a_get_was_retried, 4 * FAIL_TIMEOUT_S, "no GET reached the stub", every=0.5)
    finally:
        stub.close()
    stub = Stub(port, "busy")
    try:
        c = httpx.Client(base_url=up.url, timeout=30)
        answers: list[httpx.Response] = []

        def a_503_came_through() -> bool:
            answers.append(c.get("/terms"))
            return answers[-1].status_code == 503

        wait_for(a_503_came_through, 4 * FAIL_TIMEOUT_S, "no request reached the 503", every=0.5)
        assert {r.status_code for r in answers} <= {200, 503}
        busy = [r for r in answers if r.status_code == 503]
        assert stub.requests == len(busy)  # each 503 came from the stub, none was retried
        assert all(r.headers["retry-after"] == "5" for r in busy)
        assert "database is unavailable" in busy[0].text
    finally:
        stub.close()
        up.restart_replica(1)


def test_a_reload_after_scaling_out_adds_a_replica_without_dropping_requests(
    up: Proxied,
) -> None:
    """docs/deploy.md: after `--scale web=N`, reload the proxy. A third replica joins
    the rotation on reload while learners keep browsing, none of them refused."""
    third_port = free_port()
    third = start_replica(up.stack, "server3", third_port)
    statuses: list[int] = []
    stop = threading.Event()

    def browse() -> None:
        with httpx.Client(base_url=up.url, timeout=30) as c:
            while not stop.is_set():
                try:
                    try:
                        statuses.append(c.get("/terms").status_code)
                    except httpx.RemoteProtocolError:
                        # The old nginx worker closed this kept-alive connection as the
                        # request went out: a browser retries an idempotent GET on a new
                        # connection (RFC 9112 §9.3.1), and so does this learner, once.
                        statuses.append(c.get("/terms").status_code)
                except httpx.HTTPError:  # a dropped or refused connection
                    statuses.append(0)

    try:
        learner = threading.Thread(target=browse, daemon=True)
        learner.start()
        before = len(up.nginx.access())
        up.configure([*up.ports, third_port])

        def third_serves() -> bool:
            httpx.get(up.url + "/healthz", timeout=10)
            return third_port in upstream_ports(up.nginx.access()[before:])

        wait_for(third_serves, 20, "the third replica never received a request")
        stop.set()
        learner.join(30)
        assert statuses and set(statuses) == {200}, Counter(statuses)
    finally:
        stop.set()
        up.configure(up.ports)
        third.stop()

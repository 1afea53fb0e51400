"""A burst of 500 simultaneous requests of every kind from one client (issue 13,
item 1): connections are opened first, then every request is released at once,
the way that wedged the server before (a thread pool trickles requests in and
never finds it). Nothing may fail except a quick 429/503 with ``Retry-After``,
and liveness keeps answering throughout. The figures go to docs/reliability.md."""

from __future__ import annotations

import asyncio
import sys
import time
from dataclasses import dataclass, field

import httpx

from tests.integration.conftest import Stack, run_async, setting_default, start, wait_final

BURST = 500
STREAMS = 100
# Liveness probes that must come back while the burst is still being served. How fast
# they come back is a figure for benchmarks/burst.py, not a timed assertion here.
MIN_PROBES_DURING_BURST = 3


@dataclass
class Probed:
    status: int
    seconds: float
    done: float  # monotonic time of the answer
    retry_after: str


@dataclass
class Tally:
    codes: list[int] = field(default_factory=list)
    paths: list[str] = field(default_factory=list)  # the path of each code
    bad: list[str] = field(default_factory=list)
    healthz_s: list[float] = field(default_factory=list)
    healthz_done: list[float] = field(default_factory=list)  # monotonic time of each answer
    burst_span: tuple[float, float] = (0.0, 0.0)  # released … last answer
    healthz: list[Probed] = field(default_factory=list)
    refused: list[Probed] = field(default_factory=list)  # the over-the-limit stream probe
    cap: int = 0  # the learner's stream limit
    admitted: int = 0  # the burst's streams let in
    full: asyncio.Event = field(default_factory=asyncio.Event)  # admitted reached cap


async def _one(
    c: httpx.AsyncClient,
    path: str,
    gate: asyncio.Event,
    tally: Tally,
    hold: asyncio.Event | None = None,
) -> None:
    await gate.wait()
    t0 = time.monotonic()
    try:
        if path.endswith("/events"):
            async with c.stream("GET", path) as r:
                body = r.aiter_bytes()
                await anext(body, b"")  # the stream answered
                if r.status_code == 200:
                    tally.admitted += 1
                    if tally.admitted >= tally.cap:
                        tally.full.set()
                if r.status_code == 200 and hold is not None:
                    # and stays open, as a learner's run page does (the iterator is kept:
                    # a dropped one is finalised, which closes the response)
                    await hold.wait()
                await body.aclose()
        else:
            r = await c.get(path)
    except httpx.HTTPError as e:
        tally.bad.append(f"{path}: {type(e).__name__}")
        return
    seconds = time.monotonic() - t0
    tally.codes.append(r.status_code)
    tally.paths.append(path)
    if r.status_code >= 500 or r.status_code == 429:
        # How fast a refusal comes back is measured by the probes (see PROBE).
        told = r.headers.get("retry-after", "").isdigit()
        if r.status_code not in (429, 503) or not told:
            tally.bad.append(f"{path}: {r.status_code} after {seconds:.1f}s")


# Probes run in processes of their own and open a connection per probe, as a load
# balancer's or another learner's browser does. Timing answers inside the burst's own
# event loop would time that client as well: it spends about a second sending its 500
# requests before it reads the first answer, so every answer it times looks slow.
PROBE = r"""
import http.client, select, sys, time, urllib.parse
u = urllib.parse.urlsplit(sys.argv[1])
every, path, cookie = float(sys.argv[2]), sys.argv[3], sys.argv[4]
headers = {"Cookie": cookie} if cookie else {}
print("ready", flush=True)
out = []
while not select.select([sys.stdin], [], [], every)[0]:  # until stdin closes
    t0 = time.monotonic()
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=60)
    conn.request("GET", path, headers=headers)
    r = conn.getresponse()  # the status line and headers: enough, even for a stream
    retry = r.getheader("Retry-After") or "-"
    conn.close()
    out.append(f"{r.status} {t0} {time.monotonic()} {retry}")
print("\n".join(out), flush=True)
"""
PROBE_EVERY_S = 0.02


async def _probe(url: str, stop: asyncio.Event, path: str, cookie: str = "") -> list[Probed]:
    """GET ``path`` every PROBE_EVERY_S from a separate process until ``stop``."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", PROBE, url, str(PROBE_EVERY_S), path, cookie,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )  # fmt: skip
    assert proc.stdin is not None and proc.stdout is not None
    assert (await proc.stdout.readline()).strip() == b"ready"
    await stop.wait()
    proc.stdin.close()  # end of input: the probe stops and reports
    out = []
    for line in (await proc.stdout.read()).decode().splitlines():
        status, start, end, retry = line.split()
        out.append(Probed(int(status), float(end) - float(start), float(end), retry))
    await proc.wait()
    return out


async def _burst(
    url: str, cookies: httpx.Cookies, paths: list[str], refused_path: str = "", cap: int = 0
) -> Tally:
    """``paths`` released at once from one client, with /healthz probed throughout and,
    given ``refused_path``, that path probed with the same cookies once the burst holds
    ``cap`` streams open (so each probe is over the learner's limit: a quick 429)."""
    tally = Tally(cap=cap)
    limits = httpx.Limits(max_connections=BURST, max_keepalive_connections=BURST)
    cookie = "; ".join(f"{k}={v}" for k, v in cookies.items())
    async with httpx.AsyncClient(base_url=url, cookies=cookies, limits=limits, timeout=120) as c:
        await asyncio.gather(*(c.get("/healthz") for _ in range(BURST)))  # open connections
        gate, stop = asyncio.Event(), asyncio.Event()
        health = asyncio.create_task(_probe(url, stop, "/healthz"))
        hold = asyncio.Event()  # the streams that were let in stay open until the end
        tasks = [asyncio.create_task(_one(c, p, gate, tally, hold)) for p in paths]
        await asyncio.sleep(0.5)
        released = time.monotonic()
        gate.set()
        refused = None
        if refused_path:
            await asyncio.wait_for(tally.full.wait(), 60)  # the learner's slots are taken
            probing = time.monotonic()
            refused = asyncio.create_task(_probe(url, stop, refused_path, cookie))
        pages = [t for t, p in zip(tasks, paths, strict=True) if not p.endswith("/events")]
        await asyncio.gather(*pages)
        tally.burst_span = (released, time.monotonic())
        await asyncio.sleep(0.2)
        if refused_path:  # give the refusal probe a second at least
            await asyncio.sleep(max(0.0, probing + 1.0 - time.monotonic()))
        stop.set()
        tally.healthz = await health
        tally.refused = await refused if refused is not None else []
        hold.set()
        await asyncio.gather(*tasks)
    tally.healthz_s = [p.seconds for p in tally.healthz]
    tally.healthz_done = [p.done for p in tally.healthz]
    return tally


def test_a_burst_of_every_kind_of_request_does_not_wedge_the_server(live: Stack) -> None:
    c = live.learner()
    done = start(c, "sandbox-probe", {"mode": "ok"})
    wait_final(c, done)
    # Longer than any burst takes: its streams must stay open throughout (a run that
    # ends would end them and free the learner's slots). The lab allows 30 s.
    slow = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 28})
    kinds = [
        "/terms/alpha",
        f"/api/runs/{done}",
        "/notebook",
        "/progress",
        f"/runs/{done}",
        "/search?q=alpha",
    ]
    paths = [f"/api/runs/{slow}/events"] * STREAMS
    paths += [kinds[i % len(kinds)] for i in range(BURST - STREAMS)]
    cap = int(setting_default("LOWBIT_MAX_STREAMS_PER_LEARNER"))
    tally = run_async(_burst(live.url, c.cookies, paths, f"/api/runs/{slow}/events", cap))
    assert tally.bad == [], tally.bad[:10]
    assert len(tally.codes) == BURST
    pages = [code for code, p in zip(tally.codes, tally.paths, strict=True) if "/events" not in p]
    streams = [code for code, p in zip(tally.codes, tally.paths, strict=True) if "/events" in p]
    assert pages.count(200) >= len(pages) * 0.9, sorted(set(pages))
    # One learner holds at most its stream limit open; the rest were refused with 429.
    assert streams.count(200) == cap and streams.count(429) == STREAMS - cap
    released, ended = tally.burst_span
    during = [t for t in tally.healthz_done if released < t < ended]
    assert len(during) >= MIN_PROBES_DURING_BURST, (len(during), max(tally.healthz_s))
    # Another page of the same learner opening a stream while the burst holds its
    # streams: refused at once, every time.
    refused = tally.refused
    assert len(refused) >= MIN_PROBES_DURING_BURST, len(refused)
    assert {p.status for p in refused} == {429}, [p.status for p in refused]
    assert all(p.seconds < 1 and p.retry_after.isdigit() for p in refused), max(
        p.seconds for p in refused
    )
    c.post(f"/api/runs/{slow}/cancel")


def test_event_streams_per_learner_are_capped_and_given_back(live: Stack) -> None:
    c = live.learner()
    slow = start(c, "sandbox-probe-slow", {"mode": "sleep", "seconds": 30})
    cap = int(setting_default("LOWBIT_MAX_STREAMS_PER_LEARNER"))

    async def scenario() -> None:
        limits = httpx.Limits(max_connections=cap + 4)
        async with httpx.AsyncClient(
            base_url=live.url, cookies=c.cookies, timeout=30, limits=limits
        ) as a:
            # A stream of someone else's (or no) run is refused without using a slot.
            for _ in range(cap + 1):
                assert (await a.get("/api/runs/0000/events")).status_code == 404
            held = []
            for i in range(cap):
                path = f"/runs/{slow}/stream" if i % 2 else f"/api/runs/{slow}/events"
                r = await a.send(a.build_request("GET", path), stream=True)
                assert r.status_code == 200, (i, r.status_code)
                held.append(r)
            t0 = time.monotonic()
            over = await a.get(f"/api/runs/{slow}/events")
            assert over.status_code == 429 and time.monotonic() - t0 < 1
            assert int(over.headers["retry-after"]) >= 1
            assert "live run streams open" in over.json()["detail"]
            # Another learner from the same client is not held to this learner's limit.
            other = live.learner()
            async with httpx.AsyncClient(base_url=live.url, cookies=other.cookies) as b:
                async with b.stream("GET", f"/api/runs/{slow}/events") as r:
                    assert r.status_code == 404  # not theirs: refused, but not for the cap
            await held.pop().aclose()  # one page closed: its slot comes back
            for _ in range(50):
                r = await a.send(a.build_request("GET", f"/api/runs/{slow}/events"), stream=True)
                if r.status_code == 200:
                    break
                await asyncio.sleep(0.1)
            assert r.status_code == 200
            held.append(r)
            for r in held:
                await r.aclose()

    run_async(scenario())
    c.post(f"/api/runs/{slow}/cancel")

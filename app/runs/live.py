"""The live channel of a run or submission: a server-sent event stream that polls the
database (events, status, queue place) until the run ends. Both the runs and the
exercises routers use it (routers never import each other)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Annotated

import anyio
from fastapi import Query, Request
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from app import cpu
from app.db import INT32_MAX, Run, RunEvent
from app.runs import store
from app.runs.cost import about
from app.settings import Settings

# Seconds between database polls of an event stream: the shortest right after news
# (a run that has just started or printed usually prints again soon), doubling on each
# poll that finds nothing, up to the longest (a queued or quiet run costs little).
SSE_POLL_MIN_S = 0.05
SSE_POLL_MAX_S = 0.4
# Seconds between keep-alive comments, so proxies keep an idle stream open.
SSE_KEEPALIVE_S = 15.0
# A stream ends after this long even if the run has not (the client reconnects).
SSE_MAX_S = 3600.0
# Seconds between polls while the database is unavailable.
SSE_DB_RETRY_S = 1.0
# Event sequence numbers from the URL: out of the column's range is a 422, not a 500.
After = Annotated[int, Query(ge=0, le=INT32_MAX, description="resume after this event seq")]


@dataclass(frozen=True)
class Waiting:
    """Where a queued run stands: its place in the order workers take runs, the wait
    as the page says it ("about 40 s"; "" with no worker up) and whether a worker
    takes it. Compared between polls, so the wait is kept as said, not in seconds."""

    position: int | None
    workers_up: int
    wait: str = ""


def _poll(
    factory: sessionmaker[Session], settings: Settings, run_id: str, after: int
) -> tuple[Run, list[RunEvent], Waiting | None]:
    with factory() as s:
        run = s.get(Run, run_id)
        assert run is not None
        # Status first: events are committed before the final status, so a final
        # status read here means the events read next are complete.
        events = store.events_after(s, run_id, after)
        waiting = None
        place = store.queue_place(s, run, settings)
        if place is not None:
            waiting = Waiting(
                place.position,
                store.live_workers(s, run.queue, settings),
                about(place.wait_s) if place.wait_s is not None else "",
            )
        return run, events, waiting


polled = cpu.in_turn(_poll)  # a stream's poll runs in a turn, like a route (app.cpu)


def resume_from(request: Request, after: int) -> int:
    last = request.headers.get("last-event-id", "").strip()
    if last.isascii() and last.isdigit():
        return min(int(last), INT32_MAX)
    return after


async def stream(
    request: Request,
    run_id: str,
    after: int,
    render_event: Callable[[RunEvent], str | None],
    render_status: Callable[[Run, Waiting | None], str],
    render_end: Callable[[Run], str],
) -> AsyncIterator[str]:
    """The one live channel of a run: its events, a status event whenever the status
    (or, while queued, the queue place) changes, and ``end`` once it is final."""
    factory = request.app.state.sessionmaker
    settings = request.app.state.settings
    last_seq: int = after
    last_status: tuple[str, Waiting | None] | None = None
    started = last_sent = time.monotonic()
    pause = SSE_POLL_MIN_S
    yield "retry: 1000\n\n"
    with request.app.state.run_news.watch(run_id) as rung:
        while time.monotonic() - started < SSE_MAX_S:
            if await request.is_disconnected():
                return
            rung.clear()  # a ring from here on (the worker wrote news) ends the wait below
            try:
                run, events, waiting = await anyio.to_thread.run_sync(
                    polled, factory, settings, run_id, last_seq
                )
            except (OperationalError, InterfaceError):
                # The database is restarting: keep the stream open and poll again
                # rather than drop the learner's page into a reconnect loop.
                await anyio.sleep(SSE_DB_RETRY_S)
                continue
            for e in events:
                text = render_event(e)
                if text:
                    yield text
                last_seq = e.seq
            news = bool(events)
            if (run.status, waiting) != last_status:
                last_status, news = (run.status, waiting), True
                yield render_status(run, waiting)
            if run.is_final:
                yield render_end(run)
                return
            if events or time.monotonic() - last_sent > SSE_KEEPALIVE_S:
                if not events:
                    yield ": keep-alive\n\n"
                last_sent = time.monotonic()
            pause = SSE_POLL_MIN_S if news else min(pause * 2, SSE_POLL_MAX_S)
            with anyio.move_on_after(pause):
                await rung.wait()


SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}

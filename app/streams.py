"""How many event streams one learner, and one client, may hold open at once.

An open stream costs a database poll every 0.05-0.4 s and a slot in the web process
for as long as it stays open (up to an hour): a page that opens streams in a loop, or a
client that opens a hundred, must not take that from everyone else. Each stream takes a
slot for its learner and one for its client (``client_key``: an anonymous client
without cookies is a new learner on every request, its address is not). A stream over
either limit is refused with 429 and ``Retry-After`` before it starts; a slot is given
back when its response ends, however it ends.

Counted per web process: behind a proxy with several replicas the limits hold per
replica, which is what they protect.
"""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Request
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from app.ratelimit import RateLimited

# Seconds a refused stream is told to wait: a slot frees when another stream ends.
RETRY_AFTER_S = 5


class StreamSlots:
    """Open streams per learner and per client, under one lock (routes run in threads)."""

    def __init__(self, per_learner: int, per_client: int):
        self.per_learner = per_learner
        self.per_client = per_client
        self._lock = threading.Lock()
        self._learners: Counter[str] = Counter()
        self._clients: Counter[str] = Counter()

    def take(self, learner: str, client: str) -> Slot:
        """A slot for one more stream, or RateLimited (429) naming the limit it hit."""
        with self._lock:
            if self._learners[learner] >= self.per_learner:
                raise RateLimited(
                    f"You have {self.per_learner} live run streams open already (one per "
                    "open run page). Close a run page or wait for a run to end, then reload.",
                    RETRY_AFTER_S,
                )
            if self._clients[client] >= self.per_client:
                raise RateLimited(
                    f"Too many live run streams from your network ({self.per_client}). "
                    "Close some run pages and reload.",
                    RETRY_AFTER_S,
                )
            self._learners[learner] += 1
            self._clients[client] += 1
        return Slot(self, learner, client)

    def _give_back(self, learner: str, client: str) -> None:
        with self._lock:
            for counts, key in ((self._learners, learner), (self._clients, client)):
                counts[key] -= 1
                if counts[key] <= 0:
                    del counts[key]


class Slot:
    """One taken slot; ``release`` gives it back (once, whatever calls it twice).
    ``handed_over``: a response owns it now and releases it when it has been sent."""

    def __init__(self, slots: StreamSlots, learner: str, client: str):
        self._slots, self._learner, self._client = slots, learner, client
        self._held = True
        self._lock = threading.Lock()
        self.handed_over = False

    def release(self) -> None:
        with self._lock:
            if not self._held:
                return
            self._held = False
        self._slots._give_back(self._learner, self._client)


class SlotStreamingResponse(StreamingResponse):
    """A StreamingResponse that gives its slot back when it is done being sent: the
    stream ended, the client went away, or sending failed. (Releasing in the body's
    generator would leak the slot when the body is never started.)"""

    def __init__(self, content: Any, slot: Slot, **kwargs: Any):
        super().__init__(content, **kwargs)
        self.slot = slot
        slot.handed_over = True

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.slot.release()


async def stream_slot(request: Request) -> AsyncIterator[Slot]:
    """Dependency: a stream slot for the request's learner and client, taken on the
    event loop before anything waits for a thread, so a refusal is immediate. Released
    here unless the route handed it to a SlotStreamingResponse (then that releases
    it when the stream ends): a 404 or a failed check gives it back at once."""
    slots: StreamSlots = request.app.state.streams
    slot = slots.take(request.state.learner_id, request.state.client_key)
    try:
        yield slot
    finally:
        if not slot.handed_over:
            slot.release()


StreamSlot = Annotated[Slot, Depends(stream_slot)]

"""The worker's side of a lab child's pipes: parses its JSON lines and printed
output, applies the output and result caps, and batches events (``executor``)."""

from __future__ import annotations

import json
from typing import Any

from labs.runtime.limits import SandboxConfig

EventBatch = list[tuple[str, dict[str, Any]]]

# How a result message begins on the wire (``pipe.send({"t": "result", …})``).
_RESULT_MARK = b'"t": "result"'


class Collector:
    """Parent side: parses the child's output, applies the output cap, batches events."""

    def __init__(self, cfg: SandboxConfig):
        self.cfg = cfg
        self.events: EventBatch = []
        self.progress: dict[str, Any] | None = None
        self.printed: list[str] = []
        self.used = 0
        self.dropped = 0
        self.truncated = False
        self.hello: dict[str, Any] | None = None
        self.result: dict[str, Any] | None = None
        self.error: dict[str, Any] | None = None
        self.ev_buf = b""
        self.skip_line = False
        # A line too long to keep, dropped as it streams: its size so far, and
        # whether it is the result (then the run says so instead of "no result").
        self.skipped_bytes = 0
        self.skipped_result = False
        self.stderr_tail = ""

    def _admit(self, size: int) -> bool:
        if self.used + size <= self.cfg.output_bytes:
            self.used += size
            return True
        self._drop(size)
        return False

    def _drop(self, size: int) -> None:
        self.dropped += size
        if not self.truncated:
            self.truncated = True
            self.events.append(
                (
                    "notice",
                    {
                        "level": "warning",
                        "code": "output_truncated",
                        "text": f"Output truncated: this run keeps the first {self.cfg.output_bytes:,} bytes "
                        "of output; the rest was dropped.",
                    },
                )
            )

    def feed_events(self, chunk: bytes) -> None:
        self.ev_buf += chunk
        while True:
            nl = self.ev_buf.find(b"\n")
            if nl < 0:
                if len(self.ev_buf) > self.cfg.output_bytes + self.cfg.result_bytes:
                    # One line longer than anything we would keep: drop it as it streams.
                    if not self.skip_line:
                        self.skipped_result = _RESULT_MARK in self.ev_buf[:64]
                    self.skipped_bytes += len(self.ev_buf)
                    self._drop(len(self.ev_buf))
                    self.ev_buf = b""
                    self.skip_line = True
                return
            line, self.ev_buf = self.ev_buf[:nl], self.ev_buf[nl + 1 :]
            if self.skip_line:
                self.skip_line = False
                if self.skipped_result:
                    self._result_too_large(self.skipped_bytes + len(line))
                self.skipped_bytes, self.skipped_result = 0, False
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            self._message(msg, len(line))

    def _message(self, msg: dict[str, Any], size: int) -> None:
        t = msg.get("t")
        if t == "event":
            kind, data = str(msg.get("kind")), msg.get("data") or {}
            if kind == "progress":
                self.progress = data
            elif self._admit(size):
                self.events.append((kind, data))
        elif t == "hello":
            self.hello = msg
        elif t == "result":
            if size > self.cfg.result_bytes:
                self._result_too_large(size)
            else:
                self.result = msg.get("result")
        elif t == "error":
            self.error = msg

    def _result_too_large(self, size: int) -> None:
        self.error = {
            "reason": "output",
            "message": f"The lab's result is {size:,} bytes, over the "
            f"{self.cfg.result_bytes:,}-byte limit, so it was not kept.",
        }

    def feed_output(self, chunk: bytes) -> None:
        text = chunk.decode("utf-8", "replace")
        self.stderr_tail = (self.stderr_tail + text)[-2000:]
        size = len(chunk)
        room = max(0, self.cfg.output_bytes - self.used)
        if size <= room:
            self.used += size
            self.printed.append(text)
        else:
            if room:
                self.printed.append(chunk[:room].decode("utf-8", "replace"))
                self.used += room
            self._drop(size - room)

    def take(self) -> EventBatch:
        batch = self.events
        if self.printed:
            batch.insert(0, ("log", {"text": "".join(self.printed), "stream": "output"}))
            self.printed = []
        if self.progress is not None:
            batch.append(("progress", self.progress))
            self.progress = None
        self.events = []
        return batch

"""Holds the loaded catalogue; in development reloads it when content changes."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path

from app.content.catalogue import Catalogue
from app.content.loader import load_catalogue
from app.content.problems import ContentError

log = logging.getLogger("lowbit.content")


def _fingerprint(content_dir: Path) -> tuple[float, int]:
    files = [
        *content_dir.rglob("*.md"),
        *content_dir.glob("*.yaml"),
        *content_dir.glob("figures/*.svg"),
    ]
    return (max((f.stat().st_mtime for f in files), default=0.0), len(files))


class ContentStore:
    def __init__(
        self,
        content_dir: Path,
        lab_ids: set[str] | None,
        reload: bool,
        on_load: Callable[[Catalogue], None] | None = None,
    ):
        self.content_dir = content_dir
        self.lab_ids = lab_ids
        self.reload = reload
        self.on_load = on_load
        self._lock = threading.Lock()
        self._checked = 0.0
        self._print = _fingerprint(content_dir)
        # Raises ContentError: the server refuses to start on invalid content.
        self.catalogue = load_catalogue(content_dir, lab_ids)
        self.last_error: ContentError | None = None
        if on_load:
            on_load(self.catalogue)

    def get(self) -> Catalogue:
        if self.reload and time.monotonic() - self._checked > 0.5:
            with self._lock:
                self._checked = time.monotonic()
                fp = _fingerprint(self.content_dir)
                if fp != self._print:
                    self._print = fp
                    try:
                        self.catalogue = load_catalogue(self.content_dir, self.lab_ids)
                        self.last_error = None
                        if self.on_load:
                            self.on_load(self.catalogue)
                        log.info("content reloaded", extra={"terms": len(self.catalogue.terms)})
                    except ContentError as e:
                        # Keep serving the last good catalogue; the error shows in the log.
                        self.last_error = e
                        log.error(
                            "content reload failed",
                            extra={"problems": [str(p) for p in e.problems]},
                        )
        return self.catalogue

"""Prometheus metrics (``GET /metrics``).

Request latency is observed in-process. Everything about runs and workers is
read from the database at scrape time, so every web replica reports the same
fleet-wide truth and nothing is lost when a process restarts.
"""

from __future__ import annotations

import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from app.db import Run, Worker, utcnow

LOOPBACK = frozenset({"127.0.0.1", "::1"})

REGISTRY = CollectorRegistry(auto_describe=True)
REQUEST_LATENCY = Histogram(
    "lowbit_http_request_duration_seconds",
    "HTTP request latency by route (seconds)",
    ["method", "route", "status"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RUN_DURATION_BUCKETS = (0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)
KILL_REASONS = ("time", "memory", "output", "sandbox", "crash")


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    REQUEST_LATENCY.labels(method, route, str(status)).observe(seconds)


class RunCollector(Collector):
    """Runs by lab and status, queue depth, run durations, worker heartbeats, sandbox kills."""

    def __init__(self, sessionmaker: Any, data_dir: Path | None = None):
        self.sessionmaker = sessionmaker
        self.data_dir = data_dir

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> Iterator[Any]:
        with self.sessionmaker() as s:
            runs = GaugeMetricFamily(
                "lowbit_runs", "Lab runs by lab and status", labels=["lab", "status"]
            )
            for lab, status, n in s.execute(
                select(Run.lab_id, Run.status, func.count()).group_by(Run.lab_id, Run.status)
            ):
                runs.add_metric([lab, status], n)
            yield runs
            depth = GaugeMetricFamily(
                "lowbit_queue_depth", "Queued runs per queue", labels=["queue"]
            )
            counts = dict(
                s.execute(
                    select(Run.queue, func.count())
                    .where(Run.status == "queued")
                    .group_by(Run.queue)
                ).all()
            )  # type: ignore[arg-type]
            for q in sorted({"cpu", "gpu", *counts}):
                depth.add_metric([q], counts.get(q, 0))
            yield depth
            hist = HistogramMetricFamily(
                "lowbit_run_duration_seconds", "Time a run spent executing", labels=["lab"]
            )
            durations: dict[str, list[float]] = {}
            for lab, d in s.execute(
                select(Run.lab_id, Run.duration_s).where(Run.duration_s.is_not(None))
            ):
                durations.setdefault(lab, []).append(float(d))
            for lab, ds in durations.items():
                buckets = [(str(b), sum(1 for d in ds if d <= b)) for b in RUN_DURATION_BUCKETS]
                buckets.append(("+Inf", len(ds)))
                hist.add_metric([lab], buckets, sum(ds))
            yield hist
            age = GaugeMetricFamily(
                "lowbit_worker_heartbeat_age_seconds",
                "Seconds since each worker's last heartbeat",
                labels=["worker", "host", "queues", "status"],
            )
            now = utcnow()
            for w in s.scalars(select(Worker)):
                age.add_metric(
                    [w.id, w.host, w.queues, w.status], (now - w.last_heartbeat).total_seconds()
                )
            yield age
            kills = CounterMetricFamily(
                "lowbit_sandbox_kills", "Runs ended by the sandbox, by reason", labels=["reason"]
            )
            reason = Run.environment["end_reason"].as_string()
            found = dict(
                s.execute(
                    select(reason, func.count()).where(reason.in_(KILL_REASONS)).group_by(reason)
                ).all()
            )  # type: ignore[arg-type]
            for r in KILL_REASONS:
                kills.add_metric([r], found.get(r, 0))
            yield kills
        if self.data_dir is not None:
            free = GaugeMetricFamily(
                "lowbit_data_dir_free_bytes",
                "Free bytes on the file system of the data directory (SQLite database and queue)",
            )
            try:
                free.add_metric([], shutil.disk_usage(self.data_dir).free)
            except OSError:
                pass
            else:
                yield free


def metrics_allowed(request: Request, token: str) -> bool:
    """With a token, only ``Authorization: Bearer <token>``; without one, only a client
    on this host's loopback that came in directly (no proxy in between, and no trusted
    proxies configured: behind a proxy the token is required)."""
    if token:
        sent = request.headers.get("authorization", "")
        return secrets.compare_digest(sent.encode(), f"Bearer {token}".encode())
    peer = request.client.host if request.client else ""
    # Any sign of a proxy in between (a same-host nginx may set only X-Real-IP, or
    # nothing) means the request is not from this host: refuse it.
    proxied = any(h in request.headers for h in ("x-forwarded-for", "x-real-ip", "forwarded"))
    behind_proxy = bool(request.app.state.settings.trusted_proxies.strip())
    return peer in LOOPBACK and not proxied and not behind_proxy


def install(app: FastAPI) -> None:
    settings = app.state.settings
    uses_disk = not settings.database_url or not settings.queue_url
    # Per app (its own database), not in the process-wide REGISTRY.
    runs_registry = CollectorRegistry()
    runs_registry.register(
        RunCollector(app.state.sessionmaker, settings.data_dir if uses_disk else None)
    )

    @app.get("/metrics", include_in_schema=False)
    def metrics_endpoint(request: Request) -> Response:
        if not metrics_allowed(request, settings.metrics_token):
            # 404, not 401: a scraper without the token learns nothing about the target.
            raise HTTPException(404, "Not Found")
        body = generate_latest(REGISTRY) + generate_latest(runs_registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

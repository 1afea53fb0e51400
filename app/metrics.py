"""Prometheus metrics (``GET /metrics``)."""

from __future__ import annotations

from fastapi import FastAPI, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    generate_latest,
)

REGISTRY = CollectorRegistry(auto_describe=True)
REQUEST_LATENCY = Histogram(
    "lowbit_http_request_duration_seconds",
    "HTTP request latency by route (seconds)",
    ["method", "route", "status"],
    registry=REGISTRY,
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
RUNS_CREATED = Counter("lowbit_runs_created_total", "Lab runs created", ["lab"], registry=REGISTRY)


def observe_request(method: str, route: str, status: int, seconds: float) -> None:
    REQUEST_LATENCY.labels(method, route, str(status)).observe(seconds)


def install(app: FastAPI) -> None:
    @app.get("/metrics", include_in_schema=False)
    def metrics_endpoint() -> Response:
        return Response(generate_latest(REGISTRY), media_type=CONTENT_TYPE_LATEST)

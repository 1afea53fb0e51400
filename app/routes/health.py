"""Liveness and readiness."""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse
from sqlalchemy import text

from app import routes
from app.deps import SessionDep, SettingsDep
from app.settings import Settings

router = routes.router(tags=["health"])


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    # async: liveness must answer while every threadpool thread is busy
    return {"status": "ok"}


def check_queue(settings: Settings) -> str | None:
    """None when the queue backend answers, else why not."""
    if settings.queue_url.startswith("redis"):
        import redis

        try:
            redis.Redis.from_url(
                settings.queue_url, socket_timeout=1, socket_connect_timeout=1
            ).ping()
        except Exception as e:  # any failure means not ready
            return f"redis: {e.__class__.__name__}"
        return None
    data_dir = settings.data_dir
    if not data_dir.exists():
        return "queue directory missing"
    return None


@router.get("/readyz")
def readyz(request: Request, session: SessionDep, settings: SettingsDep) -> JSONResponse:
    checks: dict[str, str] = {}
    try:
        session.execute(text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as e:  # report, never raise: this is a health probe
        checks["database"] = f"error: {e.__class__.__name__}"
    q = check_queue(settings)
    checks["queue"] = "ok" if q is None else f"error: {q}"
    embedded = getattr(request.app.state, "embedded_worker", None)
    if embedded is not None:  # lowbit serve --embedded-worker
        checks["embedded_worker"] = embedded.status()
    ok = all(v == "ok" for v in checks.values())
    return JSONResponse(
        {"status": "ok" if ok else "unavailable", "checks": checks}, status_code=200 if ok else 503
    )

"""Assembles the web app: settings, database, content, middleware, routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from sqlalchemy.exc import DataError, InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from app import metrics
from app.content import Catalogue
from app.content.store import ContentStore
from app.db import make_engine, make_sessionmaker
from app.logging import configure_logging
from app.middleware import LowbitMiddleware
from app.routes import (
    accounts,
    health,
    labs,
    lessons,
    notebook,
    pages,
    progress,
    quiz,
    reports,
    runs,
    search,
    static,
    terms,
)
from app.search import sync_index
from app.settings import Settings
from app.templating import StaticManifest, render, templates
from labs.registry import lab_ids

log = logging.getLogger("lowbit.app")

# What a learner reads when the database cannot take a request (HTTP 503), and the
# seconds after which a client may retry (Retry-After).
DISK_FULL_MESSAGE = (
    "The server's storage is full, so nothing new can be saved right now. "
    "Everything saved before is safe; the site's operators have been alerted. "
    "Try again in a few minutes."
)
DATABASE_DOWN_MESSAGE = (
    "The database is not answering right now (it may be restarting). "
    "Nothing you saved is lost; try again in a few seconds."
)
UNSTORABLE_MESSAGE = (
    "Some of the input cannot be stored: it contains a character or a number the "
    "database does not accept (for example a NUL character). Remove it and try again."
)
DISK_FULL_RETRY_S = 60
# nginx's status for a request the client abandoned (logged, never seen by anyone).
CLIENT_CLOSED_REQUEST = 499
DATABASE_DOWN_RETRY_S = 5
_DISK_FULL_SIGNS = ("disk is full", "no space left", "disk full", "could not extend file")


def storage_error_message(exc: Exception) -> tuple[str, int]:
    """(the learner's message, Retry-After seconds) for a database that cannot serve."""
    text = str(exc).lower()
    if any(sign in text for sign in _DISK_FULL_SIGNS):
        return DISK_FULL_MESSAGE, DISK_FULL_RETRY_S
    return DATABASE_DOWN_MESSAGE, DATABASE_DOWN_RETRY_S


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or Settings()
    configure_logging()
    engine = make_engine(settings.db_url)
    sessionmaker = make_sessionmaker(engine)

    def index(cat: Catalogue) -> None:
        with sessionmaker() as s:
            sync_index(s, cat)

    # Loads and validates all content now: invalid content refuses to start.
    store = ContentStore(settings.content_dir, lab_ids(), settings.content_reload)
    manifest = StaticManifest(settings.static_dir)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        index(store.catalogue)
        store.on_load = index
        yield
        engine.dispose()

    app = FastAPI(
        title="lowbit",
        lifespan=lifespan,
        docs_url=None,
        redoc_url=None,
        openapi_url="/api/openapi.json",
    )
    app.state.settings = settings
    app.state.engine = engine
    app.state.sessionmaker = sessionmaker
    app.state.content = store
    app.state.static = manifest
    templates.env.globals["static_url"] = manifest.url

    for module in (
        health,
        pages,
        terms,
        lessons,
        labs,
        runs,
        reports,
        search,
        quiz,
        accounts,
        progress,
        notebook,
        static,
    ):
        app.include_router(module.router)
    metrics.install(app)
    _install_error_pages(app)
    app.add_middleware(LowbitMiddleware, settings=settings)
    return app


def _wants_html(request: Request) -> bool:
    accept = request.headers.get("accept", "")
    return not request.url.path.startswith("/api/") and not accept.startswith("application/json")


def _install_error_pages(app: FastAPI) -> None:
    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        if _wants_html(request):
            ctx: dict[str, Any] = {
                "status": exc.status_code,
                "detail": exc.detail,
                "suggestions": [],
            }
            if exc.status_code == 404:
                ctx["suggestions"] = getattr(request.state, "suggestions", [])
            return render(request, "error.html", ctx, status_code=exc.status_code)
        return JSONResponse(
            {"detail": exc.detail},
            status_code=exc.status_code,
            headers=getattr(exc, "headers", None),
        )

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        errors = [
            {
                "field": ".".join(str(p) for p in e["loc"] if p not in ("body", "query", "path")),
                "message": e["msg"],
            }
            for e in exc.errors()
        ]
        if _wants_html(request):
            return render(
                request,
                "error.html",
                {"status": 422, "detail": "Some of the input was not valid.", "errors": errors},
                status_code=422,
            )
        return JSONResponse({"detail": errors}, status_code=422)

    def error_response(
        request: Request,
        status: int,
        detail: str,
        json_extra: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """The error page for a browser, ``{"detail": …}`` for an API client."""
        if _wants_html(request):
            resp = render(
                request,
                "error.html",
                {"status": status, "detail": detail, "suggestions": []},
                status_code=status,
            )
            resp.headers.update(headers or {})
            return resp
        body = {"detail": detail, **(json_extra or {})}
        return JSONResponse(body, status_code=status, headers=headers)

    async def storage_unavailable(request: Request, exc: Exception) -> Response:
        rid = getattr(request.state, "request_id", "")
        detail, retry = storage_error_message(exc)
        log.error(
            "database unavailable",
            extra={"request_id": rid, "error": f"{type(exc).__name__}: {str(exc)[:300]}"},
        )
        headers = {"Retry-After": str(retry)}
        return error_response(request, 503, detail, {"request_id": rid}, headers)

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, exc: ClientDisconnect) -> Response:
        # The client closed the connection while sending its request: nobody reads
        # this answer, and it is not a server error.
        log.info(
            "client disconnected", extra={"request_id": getattr(request.state, "request_id", None)}
        )
        return Response(status_code=CLIENT_CLOSED_REQUEST)

    @app.exception_handler(DataError)
    async def unstorable_input(request: Request, exc: DataError) -> Response:
        # The database refused a value a validator let through (a NUL character in
        # text, a number out of a column's range): the input is at fault, not the server.
        log.warning(
            "input the database refused",
            extra={
                "request_id": getattr(request.state, "request_id", None),
                "error": str(exc.orig)[:300],
            },
        )
        return error_response(request, 422, UNSTORABLE_MESSAGE)

    # A database that is restarting, unreachable, locked too long or out of disk
    # is an outage to report clearly (503 + Retry-After), not a bug (500).
    for exc_type in (OperationalError, InterfaceError, PoolTimeoutError):
        app.add_exception_handler(exc_type, storage_unavailable)

    @app.exception_handler(Exception)
    async def server_error(request: Request, exc: Exception) -> Response:
        log.exception(
            "unhandled error", extra={"request_id": getattr(request.state, "request_id", None)}
        )
        rid = getattr(request.state, "request_id", "")
        if _wants_html(request):
            return render(
                request,
                "error.html",
                {
                    "status": 500,
                    "detail": f"Something went wrong on our side (request {rid}). It has been logged.",
                    "suggestions": [],
                },
                status_code=500,
            )
        return JSONResponse({"detail": "internal error", "request_id": rid}, status_code=500)

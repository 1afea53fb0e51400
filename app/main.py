"""Assembles the web app: settings, database, content, middleware, routers."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException as StarletteHTTPException

from app import metrics
from app.content import Catalogue
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
    runs,
    search,
    static,
    terms,
)
from app.search import sync_index
from app.settings import Settings
from app.store import ContentStore
from app.templating import StaticManifest, render, templates
from labs.registry import lab_ids

log = logging.getLogger("lowbit.app")


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
        docs_url="/api/docs",
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

"""Assembles the web app: settings, database, content, middleware, routers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import anyio
from fastapi import FastAPI
from sqlalchemy import event

from app import cpu, errors, metrics
from app.content import Catalogue
from app.content.store import ContentStore
from app.db import make_engine, make_sessionmaker
from app.exercises import load_exercises
from app.logging import configure_logging
from app.middleware import LowbitMiddleware
from app.ratelimit import Limiter
from app.routes import (
    accounts,
    exercise_pages,
    exercises,
    health,
    lessons,
    notebook,
    pages,
    progress,
    quiz,
    reports,
    runs,
    search,
    shares,
    static,
    terms,
)
from app.routes import labs as lab_pages
from app.runs.bells import RunNews
from app.runs.catalog import LabCatalogue, lab_catalogue
from app.runs.queue import RunQueue
from app.search import sync_index
from app.settings import Settings, pass_models_dir_to_labs
from app.streams import StreamSlots
from app.templating import StaticManifest, templates
from labs.registry import lab_ids


def create_app(settings: Settings | None = None, labs: LabCatalogue | None = None) -> FastAPI:
    """The web app for ``settings``. ``labs`` is the lab catalogue it offers: by
    default the registry plus ``settings.extra_lab_modules`` (which only tests set)."""
    settings = settings or Settings()
    configure_logging()
    pass_models_dir_to_labs(settings)
    engine = make_engine(settings.db_url, pool_size=settings.web_threads)
    # Route threads run Python in turns and give theirs back during queries (app.cpu).
    cpu.configure(settings.web_cpu_threads)
    event.listen(engine, "before_cursor_execute", cpu.waiting_for_io)
    event.listen(engine, "after_cursor_execute", cpu.back_from_io)
    event.listen(engine, "handle_error", cpu.back_from_io)
    event.listen(engine, "commit", cpu.waiting_for_io)  # before the COMMIT round trip
    event.listen(engine, "rollback", cpu.waiting_for_io)
    event.listen(engine.pool, "reset", cpu.waiting_for_io)  # the rollback on check-in
    sessionmaker = make_sessionmaker(engine)
    event.listen(sessionmaker, "after_commit", cpu.back_from_io)
    event.listen(sessionmaker, "after_rollback", cpu.back_from_io)

    def index(cat: Catalogue) -> None:
        with sessionmaker() as s:
            sync_index(s, cat)

    # Loads and validates all content now: invalid content refuses to start.
    store = ContentStore(settings.content_dir, lab_ids(), settings.content_reload)
    manifest = StaticManifest(settings.static_dir)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # Sync routes run in this many threads; the pool has a connection for each
        # (see make_engine), so no thread ever waits on the pool for another.
        anyio.to_thread.current_default_thread_limiter().total_tokens = settings.web_threads
        index(store.catalogue)
        store.on_load = index
        app.state.run_news.start()  # streams wake when a worker rings (app.runs.bells)
        try:
            yield
        finally:
            app.state.run_news.stop()
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
    app.state.limiter = Limiter(settings)
    app.state.streams = StreamSlots(
        settings.max_streams_per_learner, settings.max_streams_per_client
    )
    app.state.content = store
    app.state.static = manifest
    app.state.labs = lab_catalogue(settings) if labs is None else labs
    app.state.exercises = load_exercises(settings)
    app.state.run_queue = RunQueue(settings)  # opens its storage on the first enqueue
    app.state.run_news = RunNews(settings.data_dir)
    templates.env.globals["static_url"] = manifest.url

    for module in (
        health,
        pages,
        terms,
        lessons,
        lab_pages,
        runs,
        exercises,
        exercise_pages,
        shares,
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
    errors.install(app)
    app.add_middleware(LowbitMiddleware, settings=settings)
    return app

"""Shared fixtures: settings on a temporary data dir, a migrated database, the app,
a live server, and Playwright pointed at Debian's Chromium."""

from __future__ import annotations

import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.settings import ROOT, Settings

# The lab modules the tests add to the catalogue (LOWBIT_EXTRA_LAB_MODULES): the
# sandbox probes, which production never offers.
TEST_LAB_MODULES = "labs.runtime.probe"
CHROMIUM = os.environ.get("LOWBIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def catalogue() -> Any:
    """The real content, loaded once per session (tests.catalogue)."""
    from tests.catalogue import real_catalogue

    return real_catalogue()


@pytest.fixture(scope="session", autouse=True)
def shared_real_catalogue() -> Iterator[None]:
    """Apps created in-process over the real content reuse the session's catalogue
    instead of loading and rendering every card again (seconds per app). Any other
    content directory (the loader's and reload tests' temporary trees) loads as usual."""
    import app.content.store as store
    from labs.registry import lab_ids as registered_labs
    from tests.catalogue import CONTENT_DIR, real_catalogue

    load = store.load_catalogue

    def load_shared(content_dir: Path, lab_ids: set[str] | None = None) -> Any:
        if Path(content_dir) == CONTENT_DIR and lab_ids == registered_labs():
            return real_catalogue()
        return load(content_dir, lab_ids)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(store, "load_catalogue", load_shared)
        yield


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(
        env="test",
        data_dir=tmp_path / "data",
        content_dir=ROOT / "content",
        extra_lab_modules=TEST_LAB_MODULES,
    )


@pytest.fixture
def migrated(settings: Settings) -> Settings:
    from app.migrate import upgrade

    settings.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(settings.db_url)
    return settings


@pytest.fixture
def client(migrated: Settings) -> Iterator:
    from fastapi.testclient import TestClient

    from app.main import create_app

    with TestClient(create_app(migrated)) as c:
        yield c


SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


@pytest.fixture(scope="module")
def read_only_client(tmp_path_factory: pytest.TempPathFactory) -> Iterator:
    """One app (migrated database, search index) and TestClient shared by a whole test
    module, for tests that only read: GET/HEAD/OPTIONS with no dependence on fresh
    cookies or state. Anything that writes (quiz answers, accounts, runs, the notebook)
    or checks CSRF takes the per-test ``client``; this one refuses unsafe methods."""
    from fastapi.testclient import TestClient

    from app.main import create_app

    class ReadOnlyClient(TestClient):
        def request(self, method: str, url: Any, *args: Any, **kwargs: Any) -> Any:
            if method.upper() not in SAFE_METHODS:
                raise AssertionError(
                    f"{method} {url} on the shared read_only_client: use the per-test client"
                )
            return super().request(method, url, *args, **kwargs)

    settings = migrated_settings(tmp_path_factory.mktemp("read-only") / "data")
    with ReadOnlyClient(create_app(settings)) as c:
        yield c


def migrated_settings(data_dir: Path) -> Settings:
    """Test settings on ``data_dir`` (created) with its SQLite database migrated."""
    from app.migrate import upgrade

    s = Settings(
        env="test",
        data_dir=data_dir,
        content_dir=ROOT / "content",
        extra_lab_modules=TEST_LAB_MODULES,
    )
    s.data_dir.mkdir(parents=True, exist_ok=True)
    upgrade(s.db_url)
    return s


def csrf_headers(client) -> dict[str, str]:  # type: ignore[no-untyped-def]
    """Visit once to get the CSRF cookie; return the header that must echo it."""
    client.get("/healthz")
    return {"X-CSRF-Token": client.cookies.get("lowbit_csrf")}


class LiveServer:
    def __init__(self, settings: Settings):
        import uvicorn

        from app.main import create_app

        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(
            create_app(settings), host="127.0.0.1", port=self.port, log_level="warning"
        )
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        deadline = time.monotonic() + 20
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("live server did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def live_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    return migrated_settings(tmp_path_factory.mktemp("live") / "data")


@pytest.fixture(scope="session")
def live_server(live_settings: Settings) -> Iterator[LiveServer]:
    with LiveServer(live_settings) as server:
        yield server


@pytest.fixture(scope="session")
def browser_type_launch_args(browser_type_launch_args: dict) -> dict:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make browser` installs Debian's chromium")
    return {
        **browser_type_launch_args,
        "executable_path": CHROMIUM,
        "args": CHROMIUM_FLAGS,
        "headless": True,
    }


PG_ADMIN_URL = os.environ.get(
    "LOWBIT_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
REDIS_URL = os.environ.get("LOWBIT_TEST_REDIS", "redis://127.0.0.1:6379")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A fresh, empty PostgreSQL database, dropped afterwards."""
    yield from _pg_database()


@pytest.fixture(scope="module")
def pg_url_module() -> Iterator[str]:
    """One PostgreSQL database shared by a test module."""
    yield from _pg_database()


def _pg_database() -> Iterator[str]:
    import uuid

    from sqlalchemy import create_engine, text

    name = f"lowbit_test_{uuid.uuid4().hex[:12]}"
    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield PG_ADMIN_URL.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

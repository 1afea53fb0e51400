"""A real stack for browser tests that run labs: server and worker processes on
SQLite + SqliteHuey, serving the real content."""

from __future__ import annotations

import secrets
from collections.abc import Iterator

import pytest

from app.settings import ROOT, Settings
from tests.integration.conftest import STACK_SETTINGS, Stack


@pytest.fixture(scope="session")
def lab_stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Stack]:
    from app.migrate import upgrade

    root = tmp_path_factory.mktemp("e2e-stack")
    env = {
        **STACK_SETTINGS,
        "LOWBIT_DATA_DIR": str(root / "data"),
        "LOWBIT_CONTENT_DIR": str(ROOT / "content"),
        "LOWBIT_SECRET_KEY": "test-secret-" + secrets.token_hex(16),
        "LOWBIT_MAX_ACTIVE_RUNS": "4",
    }
    settings = Settings(**{k.removeprefix("LOWBIT_").lower(): v for k, v in env.items()})  # type: ignore[arg-type]
    settings.data_dir.mkdir(parents=True)
    upgrade(settings.db_url)
    s = Stack("e2e", env, settings, root)
    try:
        s.ensure_running()
        yield s
    finally:
        for p in (s.worker, s.server):
            if p is not None:
                p.stop()

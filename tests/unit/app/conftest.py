"""Fixtures of the in-process app suites: one app on the real content, shared by a
test session (``inproc``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from app.settings import ROOT, Settings
from tests.conftest import TEST_LAB_MODULES
from tests.inprocess import InProcess


@pytest.fixture(scope="session")
def inproc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcess]:
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.migrate import upgrade

    data = tmp_path_factory.mktemp("inproc") / "data"
    settings = Settings(
        env="test", data_dir=data, content_dir=ROOT / "content", extra_lab_modules=TEST_LAB_MODULES
    )
    data.mkdir(parents=True)
    upgrade(settings.db_url)
    app = create_app(settings)
    with TestClient(app):  # runs the lifespan once: the search index is built
        yield InProcess(app, settings)

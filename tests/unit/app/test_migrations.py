"""Models and migrations agree, and upgrade/downgrade run on empty databases."""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import create_engine, inspect, text

from app.db import Base
from app.migrate import downgrade, include_object, upgrade


def _diff(url: str) -> list:
    engine = create_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"include_object": include_object, "compare_type": True}
        )
        diff = compare_metadata(ctx, Base.metadata)
    engine.dispose()
    return diff


def _roundtrip(url: str) -> None:
    upgrade(url)
    assert _diff(url) == []
    engine = create_engine(url)
    tables = set(inspect(engine).get_table_names())
    assert {"learners", "runs", "run_events", "workers", "search_docs"} <= tables
    engine.dispose()
    downgrade(url)
    engine = create_engine(url)
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    engine.dispose()
    upgrade(url)


def test_sqlite_models_match_migrations(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'm.db'}"
    _roundtrip(url)
    engine = create_engine(url)
    with engine.connect() as c:  # the FTS5 table exists and is fed by triggers
        c.execute(
            text(
                "INSERT INTO search_docs(kind, slug, title, aliases, definition, body) VALUES ('term','s','Scale factor','','d','b')"
            )
        )
        assert (
            c.execute(
                text("SELECT count(*) FROM search_fts WHERE search_fts MATCH 'scale'")
            ).scalar()
            == 1
        )


@pytest.mark.postgres
def test_postgres_models_match_migrations(pg_url: str) -> None:
    _roundtrip(pg_url)

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


HOSTILE_SVG = (
    '<?xml version="1.0"?><svg xmlns="http://www.w3.org/2000/svg" onload="alert(1)">'
    '<script>alert(2)</script><a href="https://evil.example/"><rect width="1"/></a></svg>'
)


def _figures_stored_before_0009_are_sanitised_by_it(url: str) -> None:
    """The pages serve a figure as stored (the worker sanitises it as it stores it):
    revision 0009 sanitises the figures stored before, once."""
    import sqlalchemy as sa

    from app.db import JSONType, utcnow
    from labs.viz.theme import sanitize_svg

    upgrade(url, "0008")
    learners = sa.table(
        "learners",
        *(sa.column(n) for n in ("id", "is_admin", "created_at", "last_seen_at")),
    )
    runs = sa.table(
        "runs",
        *(sa.column(n) for n in ("id", "learner_id", "lab_id", "status", "queue", "attempts")),
        *(sa.column(n) for n in ("cancel_requested", "event_count", "created_at")),
        *(sa.column(n, JSONType) for n in ("params", "environment", "sandbox")),
    )
    events = sa.table(
        "run_events",
        *(sa.column(n) for n in ("run_id", "seq", "kind", "created_at")),
        sa.column("data", JSONType),
    )
    log = {"text": "<script>kept: a log is escaped where it is shown</script>"}
    now = utcnow()
    engine = create_engine(url)
    with engine.begin() as c:
        c.execute(
            learners.insert().values(id="l1", is_admin=False, created_at=now, last_seen_at=now)
        )
        c.execute(
            runs.insert().values(
                id="r1", learner_id="l1", lab_id="block-quantize", status="succeeded",
                queue="cpu", attempts=1, cancel_requested=False, event_count=2, created_at=now,
                params={}, environment={}, sandbox={},
            )
        )  # fmt: skip
        c.execute(
            events.insert(),
            [
                {"run_id": "r1", "seq": 1, "kind": "plot", "created_at": now,
                 "data": {"title": "t", "svg": HOSTILE_SVG}},
                {"run_id": "r1", "seq": 2, "kind": "log", "created_at": now, "data": log},
            ],
        )  # fmt: skip
    upgrade(url)
    with engine.connect() as c:
        rows = dict(c.execute(sa.select(events.c.kind, events.c.data).order_by(events.c.seq)).all())
    engine.dispose()
    assert rows["plot"] == {"title": "t", "svg": sanitize_svg(HOSTILE_SVG)}
    svg = rows["plot"]["svg"]
    assert "<script" not in svg and "onload" not in svg and "evil" not in svg
    assert rows["log"] == log  # only figures are rewritten


def test_figures_stored_before_0009_are_sanitised_by_it(tmp_path: Path) -> None:
    _figures_stored_before_0009_are_sanitised_by_it(f"sqlite:///{tmp_path / 'm.db'}")


@pytest.mark.postgres
def test_figures_stored_before_0009_are_sanitised_by_it_on_postgres(pg_url: str) -> None:
    _figures_stored_before_0009_are_sanitised_by_it(pg_url)

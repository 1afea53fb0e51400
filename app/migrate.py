"""Run Alembic migrations from code (``lowbit migrate``, start-up, tests)."""

from __future__ import annotations

from typing import Any

from alembic import command
from alembic.config import Config

from app.settings import ROOT

# Made by the migrations with raw SQL (full-text search); invisible to the models,
# so autogenerate must not propose dropping them.
RAW_OBJECTS = frozenset(
    {
        "search_fts",
        "search_fts_data",
        "search_fts_idx",
        "search_fts_content",
        "search_fts_docsize",
        "search_fts_config",
        "ix_search_docs_tsv",
        "tsv",  # search_docs.tsv, PostgreSQL's stored tsvector (migration 0003)
    }
)


def include_object(
    obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any
) -> bool:
    return name not in RAW_OBJECTS


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)

"""search: a stored tsvector on PostgreSQL

The first migration indexed the tsvector expression, but ranking (ts_rank) and,
for small tables, matching recompute it from every document's full text on each
search: ~200 ms of database CPU per query with the real content, which the load
benchmark (benchmarks/load.py) showed saturating a 2-core machine. A stored
generated column is computed once per write; matching and ranking read it.
SQLite (FTS5) is unchanged.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_PG_TSV = (
    "setweight(to_tsvector('english', title), 'A') || "
    "setweight(to_tsvector('english', aliases), 'A') || "
    "setweight(to_tsvector('english', definition), 'B') || "
    "setweight(to_tsvector('english', body), 'C')"
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(
        f"ALTER TABLE search_docs ADD COLUMN tsv tsvector GENERATED ALWAYS AS ({_PG_TSV}) STORED"
    )
    op.execute("DROP INDEX IF EXISTS ix_search_docs_tsv")
    op.execute("CREATE INDEX ix_search_docs_tsv ON search_docs USING GIN (tsv)")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP INDEX IF EXISTS ix_search_docs_tsv")
    op.execute("ALTER TABLE search_docs DROP COLUMN IF EXISTS tsv")
    op.execute(f"CREATE INDEX ix_search_docs_tsv ON search_docs USING GIN (({_PG_TSV}))")

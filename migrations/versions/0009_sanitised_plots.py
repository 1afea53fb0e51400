"""stored figures are sanitised once, when stored: sanitise the ones stored before

The run pages sanitised a figure's SVG on every request; the worker now sanitises it
as it stores the event (``app.runs.claims.stored_data``) and the pages serve it as
stored, so the figures stored before this revision are sanitised here, once.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db
from labs.viz.theme import sanitize_svg

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BATCH = 500  # rows read at a time: a figure's SVG is up to 60 KB

run_events = sa.table(
    "run_events",
    sa.column("id", sa.Integer),
    sa.column("kind", sa.String),
    sa.column("data", app.db.JSONType),
)


def upgrade() -> None:
    bind = op.get_bind()
    last = 0
    while True:
        rows = bind.execute(
            sa.select(run_events.c.id, run_events.c.data)
            .where(run_events.c.kind == "plot", run_events.c.id > last)
            .order_by(run_events.c.id)
            .limit(BATCH)
        ).all()
        if not rows:
            break
        for row_id, data in rows:
            svg = (data or {}).get("svg")
            if svg is not None and sanitize_svg(str(svg)) != svg:
                bind.execute(
                    sa.update(run_events)
                    .where(run_events.c.id == row_id)
                    .values(data={**data, "svg": sanitize_svg(str(svg))})
                )
        last = rows[-1][0]


def downgrade() -> None:
    """Nothing to undo: a sanitised figure is what the pages served all along."""

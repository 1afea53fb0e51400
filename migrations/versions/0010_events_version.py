"""runs.events_version: the schema of a run's stored events (labs.events.SCHEMA_VERSION)

NULL for runs stored before it: schema 1, whose figures have no id (the compare page
pairs those by title).

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(sa.Column("events_version", sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("events_version")

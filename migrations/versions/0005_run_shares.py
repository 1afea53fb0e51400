"""share links: a learner can make one run public with a revocable random token

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-01
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import app.db

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_shares",
        sa.Column("token", sa.String(length=64), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("created_at", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("token"),
    )
    with op.batch_alter_table("run_shares", schema=None) as batch_op:
        batch_op.create_index("ix_run_shares_run_id", ["run_id"], unique=True)


def downgrade() -> None:
    with op.batch_alter_table("run_shares", schema=None) as batch_op:
        batch_op.drop_index("ix_run_shares_run_id")
    op.drop_table("run_shares")

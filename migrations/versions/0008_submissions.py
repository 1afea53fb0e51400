"""exercise submissions: learner code judged in the sandbox, as runs of kind "submission"

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

import app.db

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.add_column(
            sa.Column("kind", sa.String(length=16), server_default="lab", nullable=False)
        )
    op.create_table(
        "submissions",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("learner_id", sa.String(length=32), nullable=False),
        sa.Column("exercise_id", sa.String(length=80), nullable=False),
        sa.Column("mode", sa.String(length=16), nullable=False),
        sa.Column("code", sa.Text(), nullable=False),
        sa.Column("verdict", sa.String(length=16), nullable=True),
        sa.Column("message", sa.Text(), nullable=True),
        sa.Column(
            "tests",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("output", sa.Text(), nullable=False),
        sa.Column("output_truncated", sa.Boolean(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=True),
        sa.Column("created_at", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["id"], ["runs.id"], ondelete="CASCADE"),
        sa.ForeignKeyConstraint(["learner_id"], ["learners.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
    )
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_submissions_learner_exercise", ["learner_id", "exercise_id", "created_at"]
        )
    op.create_table(
        "exercise_states",
        sa.Column("learner_id", sa.String(length=32), nullable=False),
        sa.Column("exercise_id", sa.String(length=80), nullable=False),
        sa.Column("draft", sa.Text(), nullable=True),
        sa.Column("hints_shown", sa.Integer(), nullable=False),
        sa.Column("passed_at", app.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("gave_up_at", app.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("updated_at", app.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["learner_id"], ["learners.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("learner_id", "exercise_id"),
    )


def downgrade() -> None:
    op.drop_table("exercise_states")
    with op.batch_alter_table("submissions", schema=None) as batch_op:
        batch_op.drop_index("ix_submissions_learner_exercise")
    op.drop_table("submissions")
    with op.batch_alter_table("runs", schema=None) as batch_op:
        batch_op.drop_column("kind")

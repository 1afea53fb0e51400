"""choice predictions: a learner predicts which option wins (a weight kind, a method),
not only a number

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-04
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("notebook_entries", schema=None) as batch_op:
        batch_op.add_column(sa.Column("predicted_choice", sa.String(length=64), nullable=True))
        batch_op.add_column(sa.Column("actual_choice", sa.String(length=64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("notebook_entries", schema=None) as batch_op:
        batch_op.drop_column("actual_choice")
        batch_op.drop_column("predicted_choice")

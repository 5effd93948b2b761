"""the nodes the scheduler manages, as the controller's drain watch last listed them

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 19:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "scheduler_nodes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("listed_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_scheduler_nodes")),
    )


def downgrade() -> None:
    op.drop_table("scheduler_nodes")

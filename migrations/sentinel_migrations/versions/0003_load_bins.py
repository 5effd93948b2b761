"""load bins and forecasts

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 16:10:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "load_bins",
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("partition", sa.String(length=63), nullable=False),
        sa.Column("running_gpus", sa.Float(), nullable=False),
        sa.Column("pending_gpus", sa.Float(), nullable=False),
        sa.Column("submissions", sa.Integer(), nullable=True),
        sa.Column("total_gpus", sa.Float(), nullable=True),
        sa.Column("util", sa.Float(), nullable=True),
        sa.Column("source", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("ts", "partition", name=op.f("pk_load_bins")),
    )
    op.create_table(
        "forecasts",
        sa.Column("made_ts", sa.Float(), nullable=False),
        sa.Column("partition", sa.String(length=63), nullable=False),
        sa.Column("target", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("point", sa.Float(), nullable=False),
        sa.Column("lo", sa.Float(), nullable=False),
        sa.Column("hi", sa.Float(), nullable=False),
        sa.Column("method", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint("made_ts", "partition", "target", "ts", name=op.f("pk_forecasts")),
    )


def downgrade() -> None:
    op.drop_table("forecasts")
    op.drop_table("load_bins")

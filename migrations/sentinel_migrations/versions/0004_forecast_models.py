"""fitted demand forecasters, one per partition

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-02 17:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "forecast_models",
        sa.Column("partition", sa.String(length=63), nullable=False),
        sa.Column("fitted_ts", sa.Float(), nullable=False),
        sa.Column("fitted_bins", sa.Integer(), nullable=False),
        sa.Column("made_ts", sa.Float(), nullable=False),
        sa.Column("anchors", sa.String(length=200), nullable=False),
        sa.Column("blob", sa.LargeBinary(), nullable=False),
        sa.PrimaryKeyConstraint("partition", name=op.f("pk_forecast_models")),
    )


def downgrade() -> None:
    op.drop_table("forecast_models")

"""incidents graded into operator-facing alerts (issue 35): alert_ts, alert_reason, alert_held

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-07 03:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.add_column(sa.Column("alert_ts", sa.Float(), nullable=True))
        batch.add_column(sa.Column("alert_reason", sa.Text(), nullable=False, server_default=""))
        batch.add_column(sa.Column("alert_held", sa.Boolean(), nullable=False, server_default=sa.false()))


def downgrade() -> None:
    with op.batch_alter_table("incidents") as batch:
        batch.drop_column("alert_held")
        batch.drop_column("alert_reason")
        batch.drop_column("alert_ts")

"""operator requests can be acknowledged: who did the GPU reset or reboot, and when

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 17:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.add_column(sa.Column("acked_ts", sa.Float(), nullable=True))
        batch.add_column(sa.Column("acked_by", sa.String(length=100), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("decisions") as batch:
        batch.drop_column("acked_by")
        batch.drop_column("acked_ts")

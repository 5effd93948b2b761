"""the job table: every GPU job the queue recorder saw (issue 21)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-04 14:50:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "queue_jobs",
        sa.Column("job_id", sa.String(length=64), nullable=False),
        sa.Column("partition", sa.String(length=63), nullable=False),
        sa.Column("gpus", sa.Float(), nullable=False),
        sa.Column("submit_ts", sa.Float(), nullable=True),
        sa.Column("start_ts", sa.Float(), nullable=True),
        sa.Column("time_limit_s", sa.Float(), nullable=True),
        sa.Column("first_seen_ts", sa.Float(), nullable=False),
        sa.Column("last_seen_ts", sa.Float(), nullable=False),
        sa.Column("end_ts", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("job_id", name=op.f("pk_queue_jobs")),
    )


def downgrade() -> None:
    op.drop_table("queue_jobs")

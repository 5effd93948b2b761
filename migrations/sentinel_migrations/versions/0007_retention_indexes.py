"""indexes retention deletes by: findings, decisions and commands of an incident

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 19:10:00.000000
"""

from __future__ import annotations

from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None

TABLES = ("findings", "decisions", "commands")


def upgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.create_index(batch.f(f"ix_{table}_incident_id"), ["incident_id"], unique=False)


def downgrade() -> None:
    for table in TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_index(batch.f(f"ix_{table}_incident_id"))

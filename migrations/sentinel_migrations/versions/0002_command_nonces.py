"""command nonces: signed commands the actuator accepted, kept until they expire (replay protection)

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-02 16:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "command_nonces",
        sa.Column("nonce", sa.String(length=32), nullable=False),
        sa.Column("expires_ts", sa.Float(), nullable=False),
        sa.Column("seen_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("nonce", name=op.f("pk_command_nonces")),
    )
    op.create_index(op.f("ix_command_nonces_expires_ts"), "command_nonces", ["expires_ts"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_command_nonces_expires_ts"), table_name="command_nonces")
    op.drop_table("command_nonces")

"""outbox and actuator journal: commands remember when they were last sent; the actuator records each step

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 16:00:00.000000
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("commands") as batch:
        batch.add_column(sa.Column("sent_ts", sa.Float(), nullable=True))
        batch.create_index("ix_commands_status", ["status"])
    op.create_table(
        "actuator_commands",
        sa.Column("command_id", sa.String(length=200), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.Column("expires_ts", sa.Float(), nullable=False),
        sa.Column("accepted_ts", sa.Float(), nullable=False),
        sa.Column("finished_ts", sa.Float(), nullable=True),
        sa.Column("owner", sa.String(length=200), nullable=True),
        sa.Column("lease_until_ts", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("command_id", name=op.f("pk_actuator_commands")),
    )
    op.create_index("ix_actuator_commands_finished_ts", "actuator_commands", ["finished_ts"])
    op.create_table(
        "actuator_steps",
        sa.Column("command_id", sa.String(length=200), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("payload", sa.LargeBinary(), nullable=False),
        sa.ForeignKeyConstraint(["command_id"], ["actuator_commands.command_id"],
                                name=op.f("fk_actuator_steps_command_id_actuator_commands")),
        sa.PrimaryKeyConstraint("command_id", "step", name=op.f("pk_actuator_steps")),
    )


def downgrade() -> None:
    op.drop_table("actuator_steps")
    op.drop_index("ix_actuator_commands_finished_ts", table_name="actuator_commands")
    op.drop_table("actuator_commands")
    with op.batch_alter_table("commands") as batch:
        batch.drop_index("ix_commands_status")
        batch.drop_column("sent_ts")

"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-12-02 10:27:33.013111
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "breaker_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("is_open", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("changed_ts", sa.Float(), nullable=False),
        sa.Column("recent", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_breaker_state")),
    )
    op.create_table(
        "nodes",
        sa.Column("name", sa.String(length=63), nullable=False),
        sa.Column("first_seen_ts", sa.Float(), nullable=False),
        sa.Column("last_seen_ts", sa.Float(), nullable=False),
        sa.Column("gpu_count", sa.Integer(), nullable=False),
        sa.Column("boot_id", sa.String(length=64), nullable=False),
        sa.Column("drained_incident_id", sa.String(length=200), nullable=True),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_nodes")),
    )
    op.create_table(
        "gpus",
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("pci_bus_id", sa.String(length=64), nullable=False),
        sa.Column("model", sa.String(length=128), nullable=False),
        sa.Column("state", sa.String(length=32), nullable=False),
        sa.Column("last_seen_ts", sa.Float(), nullable=False),
        sa.Column("temp_c", sa.Float(), nullable=True),
        sa.ForeignKeyConstraint(["node"], ["nodes.name"], name=op.f("fk_gpus_node_nodes"), ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("node", "gpu_index", name=op.f("pk_gpus")),
    )
    op.create_table(
        "incidents",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("opened_ts", sa.Float(), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["node"], ["nodes.name"], name=op.f("fk_incidents_node_nodes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_incidents")),
    )
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_incidents_node_opened_ts"), ["node", "opened_ts"], unique=False)
        batch_op.create_index(batch_op.f("ix_incidents_status"), ["status"], unique=False)

    op.create_table(
        "decisions",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("incident_id", sa.String(length=200), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("mode", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("blocked_by", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], name=op.f("fk_decisions_incident_id_incidents")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_decisions")),
    )
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_decisions_node_ts"), ["node", "ts"], unique=False)

    op.create_table(
        "findings",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("incident_id", sa.String(length=200), nullable=True),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("observed_ts", sa.Float(), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=True),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("rule", sa.String(length=100), nullable=False),
        sa.Column("severity", sa.String(length=32), nullable=False),
        sa.Column("recommendation", sa.String(length=32), nullable=False),
        sa.Column("confidence", sa.Float(), nullable=False),
        sa.Column("summary", sa.Text(), nullable=False),
        sa.Column("evidence", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["incident_id"], ["incidents.id"], name=op.f("fk_findings_incident_id_incidents")),
        sa.ForeignKeyConstraint(["node"], ["nodes.name"], name=op.f("fk_findings_node_nodes")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_findings")),
    )
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_findings_node_ts"), ["node", "ts"], unique=False)

    op.create_table(
        "commands",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("decision_id", sa.String(length=200), nullable=False),
        sa.Column("incident_id", sa.String(length=200), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("action", sa.String(length=32), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("expires_ts", sa.Float(), nullable=False),
        sa.Column("drain_reason", sa.Text(), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.ForeignKeyConstraint(["decision_id"], ["decisions.id"], name=op.f("fk_commands_decision_id_decisions")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_commands")),
    )
    op.create_table(
        "action_results",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column("command_id", sa.String(length=200), nullable=False),
        sa.Column("node", sa.String(length=63), nullable=False),
        sa.Column("ts", sa.Float(), nullable=False),
        sa.Column("step", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=32), nullable=False),
        sa.Column("detail", sa.Text(), nullable=False),
        sa.Column("job_ids", sa.JSON(), nullable=False),
        sa.ForeignKeyConstraint(["command_id"], ["commands.id"], name=op.f("fk_action_results_command_id_commands")),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_action_results")),
    )
    with op.batch_alter_table("action_results", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_action_results_command_id"), ["command_id"], unique=False)


def downgrade() -> None:
    with op.batch_alter_table("action_results", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_action_results_command_id"))

    op.drop_table("action_results")
    op.drop_table("commands")
    with op.batch_alter_table("findings", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_findings_node_ts"))

    op.drop_table("findings")
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_decisions_node_ts"))

    op.drop_table("decisions")
    with op.batch_alter_table("incidents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_incidents_status"))
        batch_op.drop_index(batch_op.f("ix_incidents_node_opened_ts"))

    op.drop_table("incidents")
    op.drop_table("gpus")
    op.drop_table("nodes")
    op.drop_table("breaker_state")

"""the store is not a back door (issue 38): the outbox row's controller seal, the journal's signed envelope

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-07 21:00:00.000000

Rows written before this revision have neither: a pending outbox command is refused (not sent) and an unfinished
journal entry is refused on resume; let the commands in flight finish before upgrading.
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("commands") as batch:
        batch.add_column(sa.Column("seal", sa.LargeBinary(), nullable=True))
    with op.batch_alter_table("actuator_commands") as batch:
        batch.add_column(sa.Column("envelope", sa.LargeBinary(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("actuator_commands") as batch:
        batch.drop_column("envelope")
    with op.batch_alter_table("commands") as batch:
        batch.drop_column("seal")

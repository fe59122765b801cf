"""runtime_history: each team's run times per request class, for the core's prediction

A job without ``duration_estimate_s`` is ordered within its team by the typical run
time of the team's earlier jobs of the same shape (app/domain/runtime_history.py).
One row per (team, request class): a count and the mean log run time, updated when a
job succeeds; never a scan of the job table.

Expand only: a new table the previous release neither reads nor writes.

Revision ID: 0013
Revises: 0012
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release does not know the table
min_code_revision: str = "0012"


def upgrade() -> None:
    op.create_table(
        "runtime_history",
        sa.Column("team", sa.String(63), primary_key=True),
        sa.Column("request_class", sa.String(255), primary_key=True),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("mean_log", sa.Float(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(),
                  nullable=False),
    )


def downgrade() -> None:
    op.drop_table("runtime_history")

"""teams.max_pending, teams.submit_rate: a team's own caps on its queue; an index of
each team's pending jobs (counted against the cap at submit)

Expand only: both columns are nullable (NULL: the install's defaults,
GPUQ_TEAM_MAX_PENDING and GPUQ_TEAM_SUBMIT_RATE), so code of the previous
release keeps working against this schema and simply does not enforce them.

Revision ID: 0009
Revises: 0008
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release inserts teams without the columns: NULL is the install's default
min_code_revision: str = "0008"


def upgrade() -> None:
    op.add_column("teams", sa.Column("max_pending", sa.Integer(), nullable=True))
    op.add_column("teams", sa.Column("submit_rate", sa.Float(), nullable=True))
    op.create_index("ix_jobs_team_pending", "jobs", ["team"],
                    postgresql_where=sa.text("status = 'pending'"))


def downgrade() -> None:
    op.drop_index("ix_jobs_team_pending", table_name="jobs")
    op.drop_column("teams", "submit_rate")
    op.drop_column("teams", "max_pending")

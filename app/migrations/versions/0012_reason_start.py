"""jobs.reason_start_at: the start time a pending job's reason names, stored with it

A reason such as "waiting for reservation ..., expected start in 52s" or "job(s) X may be
preempted for it in 50 s" knows when the job should start; the API, the queue page and the
CLI showed "-" beside it, and parsing the sentence back would break whenever it is
reworded. The dispatcher writes the time with the reason (the core's ``start_in_s`` field
plus the cycle's clock); any state change clears it. NULL: the reason names no time.

Expand only: a nullable column; the previous release neither reads nor writes it (its
state changes leave a stale value behind, which it never shows and this release rewrites
at its first cycle).

Revision ID: 0012
Revises: 0011
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release neither reads nor writes the column
min_code_revision: str = "0011"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("reason_start_at", sa.DateTime(timezone=True),
                                    nullable=True))


def downgrade() -> None:
    op.drop_column("jobs", "reason_start_at")

"""jobs.reason_code, job_events.reason_code: the code of the reason beside its message

The core gives every reason a ``ReasonCode`` (app/scheduling/verdicts.py: team_quota,
capacity, reservation, ...). The message is for people and may be reworded; the code is
what the API, the pages and the metrics group by. NULL: a reason the core did not give
(a failure, a cancel, a bind the cluster refused), or a row written before this revision.

Expand only: nullable columns. The previous release neither reads nor writes them; a
row it changes keeps the code it had beside a new message until this release writes
the reason again (the dispatcher rewrites a pending reason whose code differs from the
one it would write).

Revision ID: 0014
Revises: 0013
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release neither reads nor writes the columns
min_code_revision: str = "0013"


def upgrade() -> None:
    op.add_column("jobs", sa.Column("reason_code", sa.String(32), nullable=True))
    op.add_column("job_events", sa.Column("reason_code", sa.String(32), nullable=True))


def downgrade() -> None:
    op.drop_column("job_events", "reason_code")
    op.drop_column("jobs", "reason_code")

"""jobs: an index of idempotency keys, for the front door's lookup without a team

The front door finds the jobs the listed Kubernetes workloads made by their keys
(``k8s-uid:<uid>``, app/dispatch/workloads.py) on every pass; the only index with the
key leads with the team (``uq_jobs_team_idempotency_key``), so that lookup scanned the
whole job table, a cost growing with history. Partial: most jobs have no key.

Expand only: an index; the previous release runs on this schema unchanged.

Revision ID: 0016
Revises: 0015
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0016"
down_revision: str | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# an index only: the previous release neither knows nor needs it
min_code_revision: str = "0015"


def upgrade() -> None:
    op.create_index("ix_jobs_idempotency_key", "jobs", ["idempotency_key"],
                    postgresql_where=sa.text("idempotency_key IS NOT NULL"))


def downgrade() -> None:
    op.drop_index("ix_jobs_idempotency_key", table_name="jobs")

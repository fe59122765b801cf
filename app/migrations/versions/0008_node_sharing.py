"""nodes.sharing: what a node's device layer does with its GPUs (Kubernetes)

Expand only: a JSONB column with a server default ({}), so code of the previous
release keeps inserting and reading nodes. The node sync writes the device plugin's
mode per node (exclusive, MIG single/mixed, time-slicing, MPS, HAMi, DRA; whether
gpuq offers its GPUs, and why not), and GET /v1/nodes shows it.

Revision ID: 0008
Revises: 0007
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release inserts nodes without the column: the server default fills it
min_code_revision: str = "0007"


def upgrade() -> None:
    op.add_column("nodes", sa.Column("sharing", postgresql.JSONB(), nullable=False,
                                     server_default=sa.text("'{}'::jsonb")))


def downgrade() -> None:
    op.drop_column("nodes", "sharing")

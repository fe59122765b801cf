"""gpu_types.speed: the operator's relative throughput of one card of each GPU type

Expand only: the column has a server default (1.0, every type alike), so code
of the previous release keeps working against this schema. Speed-aware
placement reads it for jobs without their own speed table (docs/operations.md
says how to measure it).

Revision ID: 0007
Revises: 0006
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release inserts GPU types without the column: the server default fills it
min_code_revision: str = "0006"


def upgrade() -> None:
    op.add_column("gpu_types", sa.Column("speed", sa.Float(), nullable=False,
                                         server_default="1.0"))


def downgrade() -> None:
    op.drop_column("gpu_types", "speed")

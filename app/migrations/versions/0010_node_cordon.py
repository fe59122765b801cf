"""nodes.cordon: an operator's cordon (or drain), kept apart from the node's definition

Being schedulable is operational state, as ``kubectl cordon`` is: an operator takes a
node out of service for maintenance whoever defined it (the config file, the API or
Kubernetes), and a config apply or a Kubernetes node sync, which rewrite the node's
definition, leave the cordon alone. NULL is "not cordoned"; else
``{"by", "at", "reason", "drain"}`` (``drain``: also stop the jobs running there).

Expand only: a nullable column; the previous release inserts nodes without it
(not cordoned) and ignores it.

Revision ID: 0010
Revises: 0009
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release neither reads nor writes the column
min_code_revision: str = "0009"


def upgrade() -> None:
    op.add_column("nodes", sa.Column("cordon", postgresql.JSONB(), nullable=True))


def downgrade() -> None:
    op.drop_column("nodes", "cordon")

"""gpu_types.product_label, memory_label: the node labels another vendor's GPU type is
recognised by (AMD's node labeller, Intel's, ...)

Expand only: two nullable columns, so code of the previous release keeps inserting and
reading GPU types. The node sync matches a node to such a type by the value of its
product label (against the type's `product` pattern) and memory label.

Revision ID: 0011
Revises: 0010
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release inserts GPU types without the columns: they stay NULL
min_code_revision: str = "0010"


def upgrade() -> None:
    op.add_column("gpu_types", sa.Column("product_label", sa.String(317), nullable=True))
    op.add_column("gpu_types", sa.Column("memory_label", sa.String(317), nullable=True))


def downgrade() -> None:
    op.drop_column("gpu_types", "memory_label")
    op.drop_column("gpu_types", "product_label")

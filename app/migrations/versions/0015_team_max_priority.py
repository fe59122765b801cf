"""teams.max_priority: the highest priority class a team's jobs may name

A tenant could name any priority class, so any team could make its jobs P0: never
preempted, ahead of every other team. NULL: any class, as before.

Expand only: a nullable column. The previous release inserts teams without it and does
not enforce it; a team's ceiling acts once this release serves the submits.

Revision ID: 0015
Revises: 0014
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0015"
down_revision: str | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# the previous release neither reads nor writes the column
min_code_revision: str = "0014"


def upgrade() -> None:
    op.add_column("teams", sa.Column("max_priority", sa.String(63), nullable=True))
    op.create_foreign_key(
        op.f("fk_teams_max_priority_priority_classes"), "teams", "priority_classes",
        ["max_priority"], ["name"], ondelete="RESTRICT",
    )


def downgrade() -> None:
    op.drop_constraint(op.f("fk_teams_max_priority_priority_classes"), "teams",
                       type_="foreignkey")
    op.drop_column("teams", "max_priority")

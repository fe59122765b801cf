"""${message}

Revision ID: ${up_revision}
Revises: ${down_revision | comma,n}
Create Date: ${create_date}
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
${imports if imports else ""}

revision: str = ${repr(up_revision)}
down_revision: str | None = ${repr(down_revision)}
branch_labels: str | Sequence[str] | None = ${repr(branch_labels)}
depends_on: str | Sequence[str] | None = ${repr(depends_on)}
# Expand-then-contract (docs/upgrading.md): the oldest code revision that still runs on
# the schema this leaves; at most down_revision, so the previous release keeps running
# while this one rolls out. A step that drops or renames something sets
# `contract = True` and a min_code_revision at or after the release that stopped using it.
min_code_revision: str = ${repr(down_revision)}


def upgrade() -> None:
    ${upgrades if upgrades else "pass"}


def downgrade() -> None:
    ${downgrades if downgrades else "pass"}

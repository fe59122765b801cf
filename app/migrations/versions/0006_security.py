"""security: team Pod policy, managed_by, named/scoped/expiring tokens, submitted_by, audit_log

Expand only: every new column is nullable or has a server
default, so code of the previous release keeps working against this schema.

- teams: ``namespaces``, ``pod_security``, ``service_accounts``,
  ``automount_service_account_token`` (the Pod policy of app/domain/pod_policy.py);
- gpu_types, nodes, pools, priority_classes, teams: ``managed_by`` (the config
  file an object came from; API writes to it are refused);
- api_tokens: ``name``, ``scope``, ``expires_at``, ``created_by``; ``team``
  nullable (admin tokens live here too); a statement trigger bumps
  ``catalog_revision`` on every write, so a process's principal cache knows a
  token was revoked with the same one tiny read the submit path already does;
- jobs: ``submitted_by``;
- audit_log: admin writes (who, what, when, old and new value).

Revision ID: 0006
Revises: 0005
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# The oldest code revision that still runs on this schema (docs/upgrading.md):
# expand only: nullable columns, server defaults, a new table.
min_code_revision: str = "0005"

MANAGED = ("gpu_types", "nodes", "pools", "priority_classes", "teams")


def upgrade() -> None:
    op.add_column(
        "teams",
        sa.Column("namespaces", postgresql.JSONB(), nullable=False,
                  server_default=sa.text("'[]'::jsonb")),
    )
    op.add_column(
        "teams",
        sa.Column("pod_security", sa.String(16), nullable=False, server_default="restricted"),
    )
    op.add_column(
        "teams",
        sa.Column("service_accounts", postgresql.JSONB(), nullable=False,
                  server_default=sa.text("'[\"default\"]'::jsonb")),
    )
    op.add_column(
        "teams",
        sa.Column("automount_service_account_token", sa.Boolean(), nullable=False,
                  server_default=sa.text("false")),
    )
    for table in MANAGED:
        op.add_column(table, sa.Column("managed_by", sa.String(255), nullable=True))
    op.alter_column("api_tokens", "team", existing_type=sa.String(63), nullable=True)
    op.add_column("api_tokens", sa.Column("name", sa.String(63), nullable=True))
    op.add_column("api_tokens", sa.Column("scope", sa.String(140), nullable=True))
    op.add_column(
        "api_tokens", sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("api_tokens", sa.Column("created_by", sa.String(255), nullable=True))
    op.execute(
        "CREATE TRIGGER api_tokens_catalog_revision AFTER INSERT OR UPDATE OR DELETE "
        "OR TRUNCATE ON api_tokens FOR EACH STATEMENT EXECUTE FUNCTION gpuq_catalog_changed()"
    )
    op.add_column("jobs", sa.Column("submitted_by", sa.String(255), nullable=True))
    op.create_table(
        "audit_log",
        sa.Column("id", sa.BigInteger(), autoincrement=True, nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(255), nullable=False),
        sa.Column("action", sa.String(32), nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("old", postgresql.JSONB(), nullable=True),
        sa.Column("new", postgresql.JSONB(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_audit_log")),
    )
    op.create_index(op.f("ix_audit_log_at"), "audit_log", ["at"], unique=False)
    op.create_index("ix_audit_log_kind_name", "audit_log", ["kind", "name"], unique=False)


def downgrade() -> None:
    op.drop_index("ix_audit_log_kind_name", table_name="audit_log")
    op.drop_index(op.f("ix_audit_log_at"), table_name="audit_log")
    op.drop_table("audit_log")
    op.drop_column("jobs", "submitted_by")
    op.execute("DROP TRIGGER api_tokens_catalog_revision ON api_tokens")
    for col in ("created_by", "expires_at", "scope", "name"):
        op.drop_column("api_tokens", col)
    op.execute("DELETE FROM api_tokens WHERE team IS NULL")
    op.alter_column("api_tokens", "team", existing_type=sa.String(63), nullable=False)
    for table in MANAGED:
        op.drop_column(table, "managed_by")
    for col in ("automount_service_account_token", "service_accounts", "pod_security",
                "namespaces"):
        op.drop_column("teams", col)

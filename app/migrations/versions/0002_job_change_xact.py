"""jobs.xact for incremental dispatcher refreshes; catalog_revision; queue_order

queue_order keeps the dispatch order of the last cycle as one array, so a
cycle writes one row instead of renumbering every pending job (with a
backlog of 20,000, every admission shifts every position).

The revision sequence is monotonic in the order values are *taken*, not in
the order transactions *commit*: a transaction holding revision 500 may
commit after another one that used 600, so "revision > last seen" can miss
rows. The 64-bit id of the writing transaction (set by a trigger on every
insert and on every update that takes a new revision) lets a reader ask
for "rows written by any transaction that had not finished when I last
looked" (``xact >= pg_snapshot_xmin`` of that look), which misses nothing.

catalog_revision is one row whose number grows (statement trigger) with
every write to gpu_types, pools, teams or priority_classes, so a process
may cache those tables and check it is current with one tiny read. It is
a row, not a sequence, because a row changes only when its writer commits:
a reader never sees the new number before the new catalog.

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None
# The oldest code revision that still runs on this schema (docs/upgrading.md):
# before the expand-then-contract rule (0004): not claimed compatible with older code.
min_code_revision: str = "0002"

CATALOG_TABLES = ("gpu_types", "pools", "teams", "priority_classes")


def upgrade() -> None:
    op.add_column("jobs", sa.Column("xact", sa.BigInteger(), nullable=True))
    op.create_index(op.f("ix_jobs_xact"), "jobs", ["xact"], unique=False)
    op.execute(
        """
        CREATE FUNCTION gpuq_jobs_xact() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            IF TG_OP = 'INSERT' OR NEW.revision IS DISTINCT FROM OLD.revision THEN
                NEW.xact := pg_current_xact_id()::text::bigint;
            END IF;
            RETURN NEW;
        END $$;
        """
    )
    op.execute(
        "CREATE TRIGGER jobs_xact BEFORE INSERT OR UPDATE ON jobs "
        "FOR EACH ROW EXECUTE FUNCTION gpuq_jobs_xact()"
    )
    op.execute("UPDATE jobs SET xact = 0 WHERE xact IS NULL")
    op.create_table(
        "catalog_revision",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("revision", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_revision")),
    )
    op.execute("INSERT INTO catalog_revision (id, revision) VALUES (1, 1)")
    op.execute(
        """
        CREATE FUNCTION gpuq_catalog_changed() RETURNS trigger LANGUAGE plpgsql AS $$
        BEGIN
            UPDATE catalog_revision SET revision = revision + 1 WHERE id = 1;
            RETURN NULL;
        END $$;
        """
    )
    op.create_table(
        "queue_order",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("job_ids", postgresql.ARRAY(sa.BigInteger()), nullable=False),
        sa.Column("writer", sa.String(length=64), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_queue_order")),
    )
    op.execute("INSERT INTO queue_order (id, job_ids) VALUES (1, '{}')")
    for table in CATALOG_TABLES:
        op.execute(
            f"CREATE TRIGGER {table}_catalog_revision AFTER INSERT OR UPDATE OR DELETE "
            f"OR TRUNCATE ON {table} FOR EACH STATEMENT EXECUTE FUNCTION gpuq_catalog_changed()"
        )


def downgrade() -> None:
    for table in CATALOG_TABLES:
        op.execute(f"DROP TRIGGER {table}_catalog_revision ON {table}")
    op.execute("DROP FUNCTION gpuq_catalog_changed()")
    op.drop_table("catalog_revision")
    op.drop_table("queue_order")
    op.execute("DROP TRIGGER jobs_xact ON jobs")
    op.execute("DROP FUNCTION gpuq_jobs_xact()")
    op.drop_index(op.f("ix_jobs_xact"), table_name="jobs")
    op.drop_column("jobs", "xact")

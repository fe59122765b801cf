"""jobs.xact: the transaction that last changed a job, for incremental dispatcher refreshes

The revision sequence is monotonic in the order values are *taken*, not in
the order transactions *commit*: a transaction holding revision 500 may
commit after another one that used 600, so "revision > last seen" can miss
rows. The 64-bit id of the writing transaction (set by a trigger on every
insert and on every update that takes a new revision) lets a reader ask
for "rows written by any transaction that had not finished when I last
looked" (``xact >= pg_snapshot_xmin`` of that look), which misses nothing.

Revision ID: 0002
Revises: 0001
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


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


def downgrade() -> None:
    op.execute("DROP TRIGGER jobs_xact ON jobs")
    op.execute("DROP FUNCTION gpuq_jobs_xact()")
    op.drop_index(op.f("ix_jobs_xact"), table_name="jobs")
    op.drop_column("jobs", "xact")

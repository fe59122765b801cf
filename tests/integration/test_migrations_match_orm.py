"""The ORM (app/store/orm.py) and the migrations describe the same schema.

Alembic's ``compare_metadata`` diffs the ORM's metadata against a database
built by the migrations alone: any table, column, type, nullability, index,
unique or foreign key that one has and the other lacks fails this test, so
a model change without its migration (or the reverse) cannot land.
"""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, MetaData, Table

from app.store.orm import Base


def _diff(engine: Engine, metadata: MetaData) -> list:
    with engine.connect() as conn:
        ctx = MigrationContext.configure(
            conn, opts={"compare_type": True, "compare_server_default": True}
        )
        return compare_metadata(ctx, metadata)


def test_orm_matches_the_migrated_schema(engine: Engine) -> None:
    diff = _diff(engine, Base.metadata)
    assert diff == [], "ORM and migrations differ:\n" + "\n".join(map(repr, diff))


def test_the_comparison_sees_a_drift(engine: Engine) -> None:
    """An ORM table the migrations never created shows up (the check can fail)."""
    drifted = MetaData()
    for table in Base.metadata.tables.values():
        table.to_metadata(drifted)
    Table("not_migrated", drifted, Column("id", Integer, primary_key=True))
    assert [d[0] for d in _diff(engine, drifted)] == ["add_table"]

"""The front door's lookup of the jobs its workloads made (app/dispatch/workloads.py
``made_by``) runs on every pass of a Kubernetes cluster: it must be served by an index
that leads with the key, not by a scan of the job table (or of an index that leads with
the team), whose size grows with history."""

from __future__ import annotations

from datetime import UTC, datetime

from sqlalchemy import insert, text

from app.dispatch.workloads import made_by
from app.store.orm import JobRow, PoolRow, PriorityClassRow, TeamRow


def test_the_workload_lookup_is_served_by_the_key_index(engine):
    """On a job table with a history (5,000 jobs of 20 teams, a tenth keyed; analysed),
    in a transaction rolled back after. An empty table made a poor test: every plan
    costs alike there, and the planner took the team-led unique index or this one by
    the state other tests left (one failed CI run)."""
    stmt = made_by([f"k8s-uid:{i}" for i in range(40)])
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    now = datetime.now(UTC)
    with engine.connect() as conn, conn.begin() as tx:
        conn.execute(insert(PoolRow), [{"name": "p"}])
        conn.execute(insert(PriorityClassRow), [{"name": "P1", "value": 500}])
        conn.execute(insert(TeamRow), [{"name": f"t{i}", "pool": "p"} for i in range(20)])
        conn.execute(insert(JobRow), [
            {"name": f"j{i}", "team": f"t{i % 20}", "pool": "p", "priority": "P1",
             "spec": {}, "submitted_at": now,
             "idempotency_key": f"k8s-uid:{i}" if i % 10 == 0 else None,
             "submitted_by": "kubernetes:front-door" if i % 10 == 0 else "admin"}
            for i in range(5000)])
        conn.execute(text("ANALYZE jobs"))
        plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {sql}")))
        tx.rollback()
    assert "ix_jobs_idempotency_key" in plan, plan
    assert "Seq Scan" not in plan, plan

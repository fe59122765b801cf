"""The front door's lookup of the jobs its workloads made (app/dispatch/workloads.py
``made_by``) runs on every pass of a Kubernetes cluster: it must be served by an index,
not by a scan of the job table, whose size grows with history."""

from __future__ import annotations

from sqlalchemy import text

from app.dispatch.workloads import made_by


def test_the_workload_lookup_is_served_by_the_key_index(engine):
    stmt = made_by([f"k8s-uid:{i}" for i in range(40)])
    sql = str(stmt.compile(engine, compile_kwargs={"literal_binds": True}))
    with engine.connect() as conn:
        # an empty table is cheapest to scan: ask for the plan without scans, which can
        # only avoid one when an index serves the lookup (before migration 0016, none did)
        conn.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {sql}")))
    assert "ix_jobs_idempotency_key" in plan, plan

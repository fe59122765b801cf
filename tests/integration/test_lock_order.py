"""Writers of job rows take their locks in one order: the job rows (by id), then what
hangs off them. A pass that returned a lease locked the lease first and then its job,
while a cancel locks its job and then ends the job's leases: a cancel during such a pass
was a lock cycle (DeadlockDetected, the pass recovered only at the next one)."""

from __future__ import annotations

import threading
import time
from datetime import timedelta

from sqlalchemy import select, text

from app.scheduling.model import LeaseReturn
from app.store import jobs as job_store
from app.store.lease_returns import return_leases
from app.store.orm import JobRow, LeaseRow
from tests.integration.conftest import job_body


def waiting_on_a_lock(engine) -> bool:
    with engine.connect() as c:
        return bool(c.scalar(text(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
            "AND datname = current_database()")))


def test_cancel_during_a_lease_return_is_no_lock_cycle(client, admin, dispatcher,
                                                        session_factory, engine, clock):
    jid = int(client.post("/v1/jobs", json=job_body(), headers=admin).json()["id"])
    dispatcher.run_once()
    with session_factory() as s:
        lease = LeaseRow(borrower="training", lender="mixed", gpu_type="a100-80g", units=20,
                         job_id=jid, started_at=clock(),
                         expires_at=clock() + timedelta(seconds=1800), state="active")
        s.add(lease)
        s.commit()
        lid = lease.id
        rev = s.scalar(select(JobRow.revision).where(JobRow.id == jid))
    ret = LeaseReturn(str(lid), str(jid), "training", "mixed", "a100-80g", 20.0, "fits")

    with session_factory() as canceller:
        job = job_store.get_job(canceller, str(jid), for_update=True)  # the cancel's lock
        errors: list[BaseException] = []

        def the_pass() -> None:
            try:
                with engine.begin() as conn:
                    return_leases(conn, [(ret, rev)], clock())
            except BaseException as e:  # noqa: BLE001 - reported below
                errors.append(e)

        t = threading.Thread(target=the_pass)
        t.start()
        deadline = time.monotonic() + 60  # a guard against a hang, not a measurement
        while not waiting_on_a_lock(engine) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert waiting_on_a_lock(engine), "the pass should wait for the cancel's lock"
        job_store.cancel_job(canceller, job, now=clock(), by="test")  # ends the lease
        canceller.commit()
        t.join(timeout=60)
    assert not errors, errors
    with session_factory() as s:
        assert s.get(JobRow, jid).status == "cancelled"
        assert s.get(LeaseRow, lid).state == "returned"

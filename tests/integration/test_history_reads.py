"""The History page reads the jobs open now and those ended inside its window, never
the whole job table: a job that ended before the window is not read at all."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import update

from app.reports.history import history_rows, series, spans
from app.store.orm import JobRow
from tests.integration.conftest import job_body


def test_only_open_jobs_and_jobs_ended_in_the_window_are_read(
    client, admin, dispatcher, session_factory, clock
):
    ids = []
    for name in ("old", "recent", "waiting"):
        r = client.post("/v1/jobs", json=job_body(name, resources={"gpus": 1}), headers=admin)
        assert r.status_code == 201, r.text
        ids.append(int(r.json()["id"]))
    dispatcher.run_once()
    for jid in ids[:2]:
        assert client.post(f"/v1/jobs/{jid}/cancel", headers=admin).status_code == 200
    now = clock()  # the app's clock: submits and cancels are stamped with it
    with session_factory() as s:  # the first one ended two days ago
        s.execute(update(JobRow).where(JobRow.id == ids[0])
                  .values(submitted_at=now - timedelta(days=3),
                          finished_at=now - timedelta(days=2)))
        s.commit()
    with session_factory() as s:
        read = {r.id for r in history_rows(s, now, 86400)}
        assert read == {ids[1], ids[2]}, read
        data = series(spans(s, now, 86400), now.timestamp(), 86400)
    assert len(data["t"]) == len(data["queue"]) == 48

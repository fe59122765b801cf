"""The live run-time history: a job that succeeds updates its (team, request class)
summary in the same transaction (app/store/runtime_history_rows.py), and the dispatcher's
next snapshot carries the prediction for the team's pending jobs of that shape."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import func, select

from app.domain.runtime_history import MIN_RUNS
from app.scheduling.model import CycleResult, Snapshot
from app.store.orm import RuntimeHistoryRow
from app.store.runtime_history_rows import read_history
from tests.integration.conftest import job_body


def _submit(client, admin, **kw) -> str:
    r = client.post("/v1/jobs", json=job_body(**kw), headers=admin)
    assert r.status_code == 201, r.text
    return r.json()["id"]


def test_succeeded_runs_make_the_prediction_the_next_snapshot_carries(
    client, admin, dispatcher, session_factory, cluster, clock
) -> None:
    a100 = {"gpus": 1, "gpu_types": ["a100-80g"]}
    cluster.default_duration_s = 300.0  # a job without an estimate runs 300 s here
    ids = [_submit(client, admin, name=f"r{i}", resources=a100, duration_estimate_s=None)
           for i in range(MIN_RUNS)]
    clock.advance(1)
    dispatcher.run_once()
    clock.advance(300)
    dispatcher.run_once()
    for jid in ids:
        assert client.get(f"/v1/jobs/{jid}", headers=admin).json()["status"] == "succeeded"
    with session_factory() as s:
        (row,) = s.scalars(select(RuntimeHistoryRow)).all()
        assert (row.team, row.runs) == ("nlp", MIN_RUNS)
        assert math.exp(row.mean_log) == pytest.approx(300.0, rel=0.01)
        # a pass that changes nothing adds nothing: each run counted once
        dispatcher.run_once()
        assert s.scalar(select(func.sum(RuntimeHistoryRow.runs))) == MIN_RUNS
        assert len(read_history(s).stats) == 1

    # the next job of that shape is pending with the prediction; another shape is not
    clock.advance(1)
    seen: dict[str, float | None] = {}
    policy = dispatcher.planner.policy_name

    def watch(snap: Snapshot) -> CycleResult:
        from app.scheduling.policies import get_policy

        seen.update({j.name: j.predicted_s for j in snap.pending})
        return get_policy(policy)(snap)

    _submit(client, admin, name="same", resources=a100, duration_estimate_s=None)
    _submit(client, admin, name="other", resources={"gpus": 8, "gpu_types": ["a100-80g"]},
            duration_estimate_s=None)
    _submit(client, admin, name="estimated", resources=a100, duration_estimate_s=50)
    dispatcher.planner.run(decide=watch)
    assert seen["same"] == pytest.approx(300.0, rel=0.01)
    assert seen["other"] is None and seen["estimated"] is None

"""The what-if replay runs the real core forward; cheaper cards let a quota-bound team run more."""

from __future__ import annotations

import pytest

from app.scheduling.engine import schedule
from app.scheduling.model import (
    Device,
    GpuType,
    JobRequest,
    Node,
    PoolInfo,
    PriorityInfo,
    Snapshot,
    TeamInfo,
)
from app.tuning.tuner import TunerConfig, TunerInputs, TunerMemory, decide
from app.tuning.whatif import Arrival, make_replay, simulate_forward, with_weights

P1 = PriorityInfo("P1", 500, True)


def req(i, team="nlp", **kw):
    base = dict(
        id=str(i),
        name=f"j{i}",
        team=team,
        pool="p",
        priority="P1",
        priority_value=500,
        preemptible=True,
        submitted_at=0.0,
        gpus=1,
        gpu_types=("v100",),
        duration_estimate_s=100.0,
    )
    base.update(kw)
    return JobRequest(**base)


def snap(pending):
    return Snapshot(
        now=0.0,
        gpu_types={"v100": GpuType("v100", 16, 4.0)},
        nodes=[Node("v-0", "v100", [Device(i) for i in range(8)], 64, 512)],
        pools={"p": PoolInfo("p", ("v100",))},
        teams={"nlp": TeamInfo("nlp", "p", quota_units=16), "cv": TeamInfo("cv", "p")},
        priorities={"P1": P1},
        running=[],
        pending=list(pending),
    )


def test_forward_replay_by_hand():
    # quota 16 CU at 4 CU/card: 4 jobs at a time, each 100 s; 8 jobs -> waits 0,0,0,0,100x4
    s = snap([req(i) for i in range(8)])
    out = simulate_forward(s, [], policy=schedule)
    assert out.jobs == 8
    # P99 of [0]*4 + [100]*4 = 100
    assert out.wait_p99_s == pytest.approx(100)
    # at 2 CU per card all 8 fit at once
    out2 = simulate_forward(with_weights(s, {"v100": 2.0}), [], policy=schedule)
    assert out2.wait_p99_s == 0


def test_arrivals_keep_their_spacing():
    s = snap([])
    arrivals = [Arrival(50.0 * i, req(100 + i, team="cv"), 30.0) for i in range(3)]
    out = simulate_forward(s, arrivals, policy=schedule)
    assert out.jobs == 3 and out.wait_p99_s == 0 and out.team_p99_s == {"cv": 0}


def test_stuck_jobs_count_to_the_horizon():
    s = snap([req(1, gpus=9)])  # 9 cards on an 8-card node: never
    out = simulate_forward(s, [], policy=schedule, horizon_s=500)
    assert out.wait_p99_s == pytest.approx(500)


def test_tuner_auto_uses_replay_gate():
    # 5 one-card jobs, quota 16 CU: at 4 CU/card one waits; at 3.2 CU/card all five run
    s = snap([req(i) for i in range(5)])
    replay = make_replay(s, [], policy=schedule)
    inputs = TunerInputs(
        now=0.0,
        weights={"v100": 4.0},
        base_weights={"v100": 4.0},
        idle_ratio={"v100": 0.5},
        imbalance=(("a100", 12, ("v100",)),),
    )
    d = decide(inputs, TunerMemory(), TunerConfig(mode="auto"), replay)
    assert d.action == "applied", d.message
    assert d.changes[0].new == pytest.approx(3.2)
    assert d.gate.before.wait_p99_s == pytest.approx(96)  # [0,0,0,0,100] at rank 3.96
    assert d.gate.after.wait_p99_s == 0

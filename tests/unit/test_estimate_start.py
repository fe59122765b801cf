"""Estimated start times: the live snapshot replayed forward through the core."""

from __future__ import annotations

from app.scheduling.model import ReplicaPlacement
from app.simulate.all_policies import get_policy
from app.simulate.estimate import MIN_REMAINING_S, estimate_starts
from tests.unit.core_fixtures import job, node, running, snap

GPUQ = get_policy("gpuq")
NOW = 1000.0


def holding(j, n="n0", devices=(0, 1, 2, 3), started_at=0.0):
    return running(
        j, ReplicaPlacement(0, n, "v100-16g", tuple(devices), units=4.0 * len(devices)),
        started_at=started_at,
    )


def test_pending_jobs_start_when_running_work_ends():
    big = job("run", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=1500)
    a = job("a", gpus=2, gpu_types=("v100-16g",), duration_estimate_s=900, submitted_at=10)
    b = job("b", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=300, submitted_at=20)
    s = snap([node("n0", "v100-16g", 4)], [a, b], running=[holding(big)], now=NOW)
    est = estimate_starts(s, GPUQ)
    # "run" started at 0 with 1500 s: ends at 1500; one team, shortest first
    # (shortest_first): b (300 s) starts then, a (900 s: not yet waited twice that) after b
    assert est.get("b") == 1500.0
    assert est.get("a") == 1800.0
    assert not est.horizon_reached and est.computed_at == NOW


def test_default_runtime_per_pool_and_overrunning_jobs():
    late = job("late", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=100)  # past due
    nodur = job("nodur", gpus=4, gpu_types=("v100-16g",))
    a = job("a", gpus=4, gpu_types=("v100-16g",), submitted_at=5)
    s = snap([node("n0", "v100-16g", 4)], [a], running=[holding(late)], now=NOW)
    assert estimate_starts(s, GPUQ).get("a") == NOW + MIN_REMAINING_S
    s = snap([node("n0", "v100-16g", 4)], [a], running=[holding(nodur, started_at=900)], now=NOW)
    assert estimate_starts(s, GPUQ, default_runtime_s={"p": 500}).get("a") == 1400.0


def test_cost_is_bounded_and_unknown_beyond_it():
    blockers = [job(f"q{i}", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=3600,
                    submitted_at=i) for i in range(50)]
    s = snap([node("n0", "v100-16g", 4)], blockers, now=NOW)
    est = estimate_starts(s, GPUQ, max_cycles=10)
    assert est.horizon_reached and est.cycles == 10
    assert est.get("q0") == NOW and est.get("q1") == NOW + 3600
    assert est.get("q49") is None  # not within the bound: no estimate, not a guess
    est = estimate_starts(s, GPUQ, horizon_s=2 * 3600)
    assert est.get("q2") == NOW + 7200 and est.get("q3") is None


def test_a_request_no_node_can_hold_gets_no_estimate():
    huge = job("huge", gpus=16, gpu_types=("v100-16g",))
    s = snap([node("n0", "v100-16g", 4)], [huge], now=NOW)
    assert estimate_starts(s, GPUQ).get("huge") is None


def test_ends_close_together_are_one_cycle_dated_at_the_first_end():
    """Four 1-card jobs end 10 s apart; the 4-card job needs all of them. One cycle per
    end (no batching) says 1130 in 5 cycles; batched, the ends fall in one 60 s window:
    2 cycles, and the start is the batch's first end, within the window of the exact one."""
    runs = [running(job(f"r{i}", gpus=1, gpu_types=("v100-16g",),
                        duration_estimate_s=100 + 10 * i),
                    ReplicaPlacement(0, "n0", "v100-16g", (i,), units=4.0), started_at=NOW)
            for i in range(4)]
    big = job("big", gpus=4, gpu_types=("v100-16g",), submitted_at=1)
    s = snap([node("n0", "v100-16g", 4)], [big], running=runs, now=NOW)
    exact = estimate_starts(s, GPUQ, batch_min_s=0, batch_share=0)
    assert exact.get("big") == NOW + 130 and exact.cycles == 5
    batched = estimate_starts(s, GPUQ)
    assert batched.get("big") == NOW + 100 and batched.cycles == 2
    # ends further apart than the window (100 s > max(60 s, lead / 4)) are not merged
    far = [running(job(f"f{i}", gpus=1, gpu_types=("v100-16g",),
                       duration_estimate_s=100 * (i + 1)),
                   ReplicaPlacement(0, "n0", "v100-16g", (i,), units=4.0), started_at=NOW)
           for i in range(4)]
    s2 = snap([node("n0", "v100-16g", 4)], [big], running=far, now=NOW)
    est = estimate_starts(s2, GPUQ)
    assert est.get("big") == NOW + 400 and est.cycles == 5


def test_jobs_beyond_max_jobs_get_no_estimate():
    blockers = [job(f"q{i}", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=60,
                    submitted_at=i) for i in range(20)]
    s = snap([node("n0", "v100-16g", 4)], blockers, now=NOW)
    est = estimate_starts(s, GPUQ, max_jobs=5)
    assert sorted(est.starts) == sorted(f"q{i}" for i in range(5))


def test_a_simulated_cluster_runs_estimates_at_its_speed():
    """The simulated cluster runs a job for duration_estimate_s / GPUQ_SIM_SPEED, so its
    estimated starts come that much sooner (they were GPUQ_SIM_SPEED times too late)."""
    from types import SimpleNamespace

    from app.api.estimates import estimator_for
    from app.settings import Settings

    big = job("run", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=1500)
    a = job("a", gpus=2, gpu_types=("v100-16g",), duration_estimate_s=900, submitted_at=10)
    b = job("b", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=300, submitted_at=20)
    s = snap([node("n0", "v100-16g", 4)], [a, b], running=[holding(big, started_at=900)],
             now=NOW)
    est = estimate_starts(s, GPUQ, sim_speed=5)
    assert est.get("b") == 900 + 1500 / 5  # 1200
    assert est.get("a") == 1200 + 300 / 5
    # a job past its estimate is given a minute of its own time: 12 s at 5x
    late = job("late", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=100)
    s = snap([node("n0", "v100-16g", 4)], [b], running=[holding(late)], now=NOW)
    assert estimate_starts(s, GPUQ, sim_speed=5).get("b") == NOW + MIN_REMAINING_S / 5
    # the service's estimator takes the simulated cluster's speed, never Kubernetes'
    for cluster, speed in (("simulated", 5.0), ("kubernetes", 1.0)):
        settings = Settings(GPUQ_SIM_SPEED=5, GPUQ_CLUSTER=cluster, GPUQ_RUN_LOOPS=False)
        app = SimpleNamespace(state=SimpleNamespace(session_factory=None, clock=None,
                                                    settings=settings))
        assert estimator_for(app).sim_speed == speed  # type: ignore[arg-type]


def test_a_preemption_in_the_replay_dates_the_preemptor_now():
    """A pending P0 job that preempts a running P1 one in the first replayed cycle starts
    "now". The replay's jobs carry no scenario spec, and naming the preemptor for the
    (unused) event log raised AttributeError: the whole estimate failed, for every job."""
    low = job("low", gpus=4, gpu_types=("v100-16g",), duration_estimate_s=3600)
    urgent = job("urgent", gpus=4, gpu_types=("v100-16g",), priority="P0",
                 priority_value=1000, preemptible=False, submitted_at=10)
    s = snap([node("n0", "v100-16g", 4)], [urgent], running=[holding(low)], now=NOW)
    assert GPUQ(s).preemptions  # the core does preempt here
    est = estimate_starts(s, GPUQ)
    assert est.get("urgent") == NOW

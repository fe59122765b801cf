"""Fairness measures in the simulation result: slowdown, Jain's index, restarts, waste."""

from __future__ import annotations

from app.domain.config import load_config_text
from app.scheduling.engine import schedule
from app.scheduling.model import CycleResult, Snapshot
from app.simulate.all_policies import make_policy
from app.simulate.measures import jain
from app.simulate.replay import ScenarioModel, Simulator, to_json
from tests.unit.test_baseline_models import ONE_FLAVOR

SPEEDS = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
  - {name: v100-32g, memory_gb: 32, weight: 4}
nodes:
  - {name: v, count: 1, gpu_type: v100-32g, gpus: 1, cpu: 8, memory_gb: 64}
pools: [{name: p}]
teams: [{name: a, pool: p}, {name: b, pool: p}]
jobs:
  - {name: a1, team: a, submit_at_s: 0, runtime_s: 100, speed: {a100-80g: 2, v100-32g: 1},
     resources: {gpus: 1}}
  - {name: b1, team: b, submit_at_s: 0, runtime_s: 100, speed: {a100-80g: 2, v100-32g: 1},
     resources: {gpus: 1}}
"""


def _doc(text: str, policy: str) -> dict:
    model = ScenarioModel.from_config(load_config_text(text))
    return to_json(Simulator(model, make_policy(policy), policy).run())


def test_jain_index():
    assert jain([2.0, 2.0, 2.0]) == 1.0
    assert abs(jain([1.0, 0.0]) - 0.5) < 1e-12
    assert jain([]) is None


def test_slowdown_is_jct_over_the_run_time_on_the_fastest_allowed_type():
    s = _doc(SPEEDS, "fifo-typed")["summary"]
    # one V100 only: the first job runs 100 s (ideal 50 s on an A100: slowdown 2), the
    # second waits 100 s and runs 100 s (slowdown 4)
    assert s["by_team"]["a"]["slowdown_mean"] == 2.0
    assert s["by_team"]["b"]["slowdown_mean"] == 4.0
    assert s["slowdown_mean"] == 3.0
    assert abs(s["jain_slowdown"] - 36 / 40) < 1e-6
    assert s["jct_mean_s"] == 150.0 and s["max_wait_s"] == 100.0
    assert s["max_team_slowdown"] == 4.0 and s["jobs_not_finished"] == 0
    assert s["worst_team_wait_p99_s"] is None  # no team with 30 jobs: no P99 claimed
    assert s["restarts"] == 0 and s["gpu_hours_thrown_away"] == 0.0
    assert abs(s["gpu_hours_used"] - 200 / 3600) < 1e-6


def test_a_preempted_run_counts_as_a_restart_and_its_gpu_hours_as_thrown_away():
    s = _doc(ONE_FLAVOR, "kueue")["summary"]
    # the borrower held 8 cards for 100 s before Kueue reclaimed 4 of them for the lender
    assert s["restarts"] == 1 and s["by_team"]["borrower"]["restarts"] == 1
    assert abs(s["gpu_hours_thrown_away"] - 800 / 3600) < 1e-6
    used = 800 + 8 * 5000 + 4 * 1000
    assert abs(s["gpu_hours_used"] - used / 3600) < 1e-6
    assert abs(s["thrown_away_pct"] - 100 * 800 / used) < 1e-4


def _facts(team: str, submit: float, end: float | None, wait: float, status: str = "succeeded"):
    from types import SimpleNamespace
    return SimpleNamespace(team=team, submit_s=submit, end_s=end, status=status, wait_s=wait,
                           ideal_runtime_s=100.0, preemptions=0, failures=0,
                           wasted_gpu_s=0.0, used_gpu_s=0.0)


def test_jobs_that_did_not_finish_count_censored_at_the_end_of_the_run():
    from app.simulate.measures import measures
    done = _facts("a", 0.0, 100.0, 0.0)
    failed = _facts("b", 0.0, None, 0.0, status="failed")
    stuck = _facts("b", 500.0, None, 1500.0, status="pending")
    s, teams = measures([done, failed, stuck], horizon_s=2000.0)
    # failed: 2000 s; stuck: 1500 s -- a policy that fails or strands jobs looks slower
    assert s["jct_mean_s"] == (100.0 + 2000.0 + 1500.0) / 3
    assert s["jobs_not_finished"] == 2
    assert teams["b"]["slowdown_mean"] == 17.5 and s["max_team_slowdown"] == 17.5


def test_worst_team_p99_only_over_teams_with_30_jobs_and_the_maximum_apart():
    from app.simulate.measures import TAIL_MIN_JOBS, measures
    big = [_facts("big", 0.0, 100.0, float(i)) for i in range(TAIL_MIN_JOBS)]
    small = [_facts("small", 0.0, 100.0, 5000.0)]  # one job: its "P99" is its maximum
    s, _ = measures(big + small)
    assert s["worst_team_wait_p99_s"] < TAIL_MIN_JOBS
    assert s["max_wait_s"] == 5000.0


def test_a_job_found_unschedulable_after_waiting_counts_its_wait():
    """``wait_s`` counts every second a job spent pending: also those before a verdict
    that it can never run (they were left out: a job that queued 500 s and was then
    judged unschedulable showed 0)."""
    def policy(snap: Snapshot) -> CycleResult:
        res = schedule(snap)
        if snap.now >= 500:  # from t=500 the core judges b never to fit
            for j in snap.pending:
                if j.name == "b1":
                    res.reasons.pop(j.id, None)
                    res.unschedulable[j.id] = "never fits (judged at t=500)"
        return res

    model = ScenarioModel.from_config(load_config_text(SPEEDS.replace(
        "runtime_s: 100, speed", "runtime_s: 1000, speed", 1)))
    doc = to_json(Simulator(model, policy, "gpuq").run())
    b = next(j for j in doc["jobs"] if j["name"] == "b1")
    assert b["status"] == "unschedulable" and b["first_start_s"] is None
    assert b["wait_s"] >= 500, b["wait_s"]  # queued from 0 until the verdict


LIMITED = """
gpu_types:
  - {name: v100-32g, memory_gb: 32, weight: 4}
nodes:
  - {name: v, count: 1, gpu_type: v100-32g, gpus: 1, cpu: 8, memory_gb: 64}
pools: [{name: p}]
teams: [{name: a, pool: p}]
jobs:
  - {name: long, team: a, submit_at_s: 0, runtime_s: 1000, time_limit_s: 300,
     resources: {gpus: 1}}
  - {name: next, team: a, submit_at_s: 1, runtime_s: 100, resources: {gpus: 1}}
"""


def test_a_run_past_its_time_limit_ends_failed_there_and_is_not_retried():
    """The replay stops a run at the job's ``time_limit_s``, as the live dispatcher does:
    the job ends failed at 300 s (counted as not finished, its GPU-hours thrown away),
    and the card goes to the next job then."""
    for policy in ("gpuq", "fifo-typed"):
        doc = _doc(LIMITED, policy)
        jobs = {j["name"]: j for j in doc["jobs"]}
        assert jobs["long"]["status"] == "failed", (policy, jobs["long"])
        assert jobs["long"]["reason"].startswith("time limit"), jobs["long"]
        assert jobs["next"]["status"] == "succeeded" and jobs["next"]["wait_s"] == 299.0
        fails = [e for e in doc["events"] if e["type"] == "fail"]
        assert [(e["job"], e["t"], e.get("reason")) for e in fails] == [
            ("long", 300.0, "time_limit")]
        s = doc["summary"]
        assert s["jobs_not_finished"] == 1 and s["restarts"] == 0
        assert abs(s["gpu_hours_thrown_away"] - 300 / 3600) < 1e-6

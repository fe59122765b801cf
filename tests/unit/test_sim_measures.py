"""Fairness measures in the simulation result: slowdown, Jain's index, restarts, waste."""

from __future__ import annotations

from app.domain.config import load_config_text
from app.simulate.measures import jain
from app.simulate.policies import make_policy
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
    assert s["jct_mean_s"] == 150.0 and s["worst_team_wait_p99_s"] == 100.0
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

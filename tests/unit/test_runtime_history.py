"""Run-time predictions from a team's history of similar requests
(app/domain/runtime_history.py): the rule the dispatcher and the simulator share."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from app.domain.config import load_config_text
from app.domain.runtime_history import MIN_RUNS, WINDOW, RunStats, RuntimeHistory, request_class
from app.scheduling.engine import schedule
from app.simulate.replay import ScenarioModel, Simulator, to_json
from tests.unit.core_fixtures import job


def test_classes_by_mode_size_in_powers_of_two_and_types() -> None:
    assert request_class(job("a", gpus=1)) == request_class(job("b", gpus=1, replicas=1))
    assert request_class(job("a", gpus=3)) == request_class(job("b", gpus=4))
    assert request_class(job("a", gpus=4)) != request_class(job("b", gpus=5))
    assert request_class(job("a", gpus=2, replicas=4)) == request_class(job("b", gpus=8))
    assert request_class(job("a", gpus=1)) != request_class(
        job("b", gpus=1, gpu_types=("v100-16g",)))
    assert request_class(job("a", gpus=None, mig="1g.10gb")) != request_class(job("b", gpus=1))


def test_no_prediction_before_min_runs_then_the_geometric_mean() -> None:
    h = RuntimeHistory()
    j = job("new", team="t", gpus=1)
    for i in range(MIN_RUNS - 1):
        h.record(job(f"r{i}", team="t", gpus=1), 100.0)
        assert h.predict(j) is None
    h.record(job("last", team="t", gpus=1), 10_000.0)
    got = h.predict(j)
    assert got == pytest.approx(math.exp((2 * math.log(100) + math.log(10_000)) / 3))
    # a job with an estimate keeps its own; another team has no history
    assert h.predict(job("e", team="t", gpus=1, duration_estimate_s=5)) is None
    assert h.predict(job("o", team="u", gpus=1)) is None


def test_each_class_of_a_team_is_predicted_from_its_own_runs_only() -> None:
    h = RuntimeHistory()
    for i in range(MIN_RUNS):
        h.record(job(f"r{i}", team="t", gpus=1), 50.0)
    for i in range(MIN_RUNS):
        h.record(job(f"b{i}", team="t", gpus=8), 5000.0)
    assert h.predict(job("s", team="t", gpus=1)) == pytest.approx(50.0)
    assert h.predict(job("b", team="t", gpus=8)) == pytest.approx(5000.0)
    assert h.predict(job("m", team="t", gpus=2)) is None  # no history of its shape


@given(st.lists(st.floats(1.0, 1e6), min_size=1, max_size=200))
def test_the_summary_stays_within_the_runs_and_follows_the_last_window(runs) -> None:
    s = RunStats()
    for r in runs:
        s = s.add(r)
    assert s.runs == len(runs)
    assert min(runs) * (1 - 1e-9) <= s.typical_s <= max(runs) * (1 + 1e-9)
    # runs of a new kind: the distance to them shrinks by (1 - 1/WINDOW) per run at least
    # (the last ~WINDOW runs count, not the whole history)
    before = abs(s.mean_log - math.log(10.0))
    for _ in range(3 * WINDOW):
        s = s.add(10.0)
    assert abs(s.mean_log - math.log(10.0)) <= before * (1 - 1 / WINDOW) ** (3 * WINDOW) + 1e-9


def test_annotate_keeps_unchanged_requests_and_sets_predictions() -> None:
    h = RuntimeHistory()
    a = job("a", team="t", gpus=1)
    assert h.annotate([a]) == [a] and h.annotate([a])[0] is a
    for i in range(MIN_RUNS):
        h.record(job(f"r{i}", team="t", gpus=1), 100.0)
    (b,) = h.annotate([a])
    assert b.predicted_s == pytest.approx(100.0) and b.expected_s == pytest.approx(100.0)


def _stream_scenario() -> str:
    """One team, one 8-card node, no estimates anywhere. Its 1-card jobs take 60 s and
    its 8-card jobs 3,000 s; after a few of each have finished, a busy node frees up with
    one 8-card job queued ahead (older) of six 1-card jobs."""
    jobs = []
    t = 0
    for i in range(MIN_RUNS):  # history: one shape after the other
        jobs.append(f"  - {{name: h8-{i}, team: t, submit_at_s: {t}, runtime_s: 3000,"
                    f" resources: {{gpus: 8}}}}")
        t += 3001
        jobs.append(f"  - {{name: h1-{i}, team: t, submit_at_s: {t}, runtime_s: 60,"
                    f" resources: {{gpus: 1}}}}")
        t += 61
    jobs.append(f"  - {{name: blocker, team: t, submit_at_s: {t}, runtime_s: 500,"
                f" resources: {{gpus: 8}}}}")
    jobs.append(f"  - {{name: big, team: t, submit_at_s: {t + 10}, runtime_s: 3000,"
                f" resources: {{gpus: 8}}}}")
    jobs += [f"  - {{name: small-{i}, team: t, submit_at_s: {t + 20 + i}, runtime_s: 60,"
             f" resources: {{gpus: 1}}}}" for i in range(6)]
    body = "\n".join(jobs)
    return f"""
gpu_types: [{{name: a100-80g, memory_gb: 80, weight: 10}}]
nodes: [{{name: n, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}}]
pools: [{{name: p}}]
teams: [{{name: t, pool: p}}]
jobs:
{body}
"""


def test_the_simulator_orders_a_team_by_the_prediction_from_its_history() -> None:
    """Before the prediction, jobs without an estimate were all 'unknown' and went by
    age: the 8-card job ran first and the six 60-s jobs waited 3,000 s behind it."""
    sim = Simulator(ScenarioModel.from_config(load_config_text(_stream_scenario())), schedule)
    doc = to_json(sim.run())
    start = {j["name"]: j["start_s"] for j in doc["jobs"]}
    assert all(start[f"small-{i}"] < start["big"] for i in range(6)), start
    assert sim.history.predict(job("x", team="t", gpus=1)) == pytest.approx(60.0)

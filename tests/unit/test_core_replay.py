"""The first simulator: virtual-time replay through the same core."""

from __future__ import annotations

import json

from app.domain.config import load_config_text
from app.scheduling.engine import schedule
from app.scheduling.model import CycleResult, LeaseGrant, Preemption, Snapshot
from app.simulate.command import run_simulate
from app.simulate.replay import ScenarioModel, Simulator, to_json

SCENARIO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
  - {name: v100-16g, memory_gb: 16, weight: 4}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 4, cpu: 64, memory_gb: 512}
  - {name: v, count: 1, gpu_type: v100-16g, gpus: 4, cpu: 64, memory_gb: 512}
pools:
  - {name: p}
teams:
  - {name: x, pool: p}
  - {name: y, pool: p}
jobs:
  - {name: big, team: x, submit_at_s: 0, runtime_s: 100,
     resources: {gpus: 4, min_gpu_memory_gb: 40}}
  - {name: second, team: y, submit_at_s: 10, runtime_s: 50,
     resources: {gpus: 2, min_gpu_memory_gb: 40}, speed: {a100-80g: 2}}
  - {name: small, team: y, submit_at_s: 10, runtime_s: 30, resources: {gpus: 1}}
  - {name: huge, team: x, submit_at_s: 5, runtime_s: 30, resources: {gpus: 9}}
"""


def model() -> ScenarioModel:
    return ScenarioModel.from_config(load_config_text(SCENARIO))


def test_replay_timeline_and_result_shape() -> None:
    doc = to_json(Simulator(model(), schedule).run())
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["big"]["start_s"] == 0 and jobs["big"]["end_s"] == 100
    # second waits for the A100s (memory), then runs twice as fast there
    assert jobs["second"]["start_s"] == 100 and jobs["second"]["end_s"] == 125
    assert jobs["second"]["wait_s"] == 90
    assert jobs["small"]["start_s"] == 10 and jobs["small"]["allocations"][0]["gpu_type"] == (
        "v100-16g")
    assert jobs["huge"]["status"] == "unschedulable"
    s = doc["summary"]
    assert s["jobs"] == 4 and s["finished"] == 3 and s["makespan_s"] == 125
    assert set(s["utilization"]) == {"a100-80g", "v100-16g"}
    # A100: 40 CU x 100 s + 20 CU x 25 s over 40 CU x 125 s
    assert abs(s["utilization"]["a100-80g"] - (4000 + 500) / (40 * 125)) < 1e-6
    assert {"x", "y"} == set(s["by_team"])
    types = [e["type"] for e in doc["events"]]
    assert types.count("admit") == 3 and types.count("finish") == 3
    for j in doc["jobs"]:
        assert {"name", "team", "pool", "priority", "submit_s", "start_s", "end_s", "wait_s",
                "status", "allocations", "preemptions"} <= set(j)


def test_preemption_requeues_with_original_submit_and_counts_wait() -> None:
    calls = {"n": 0}

    def preempt_once(snap: Snapshot) -> CycleResult:
        res = schedule(snap)
        calls["n"] += 1
        running = {r.request.id: r for r in snap.running}
        if snap.now == 10 and "0" in running:  # preempt "big" at t=10
            res.preemptions.append(Preemption("0", "test"))
            res.admissions = [a for a in res.admissions if a.job_id != "0"]
        return res

    doc = to_json(Simulator(model(), preempt_once).run())
    big = next(j for j in doc["jobs"] if j["name"] == "big")
    assert big["preemptions"] == 1
    assert big["submit_s"] == 0
    assert big["status"] == "succeeded"
    # ran 0..10, requeued at 10, restarted later; wait counts the time pending after 10
    assert big["wait_s"] == big["start_s"] - 10
    assert any(e["type"] == "preempt" and e["job"] == "big" for e in doc["events"])


def test_lease_grants_become_events() -> None:
    def with_lease(snap: Snapshot) -> CycleResult:
        res = schedule(snap)
        res.admissions = [
            type(a)(a.job_id, a.placements, (LeaseGrant("p", "q", "a100-80g", 10, 1e9),))
            for a in res.admissions
        ]
        return res

    doc = to_json(Simulator(model(), with_lease).run())
    types = [e["type"] for e in doc["events"]]
    assert types.count("lease_start") == 3 and types.count("lease_end") == 3


def test_simulate_command_writes_result(tmp_path, capsys) -> None:
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO)
    out = tmp_path / "r.json"
    assert run_simulate(str(sc), policy="gpuq", out=str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["policy"] == "gpuq" and len(doc["jobs"]) == 4
    assert "3 finished" in capsys.readouterr().out


def test_simulate_command_bad_input(tmp_path, capsys) -> None:
    assert run_simulate(str(tmp_path / "missing.yaml")) == 2
    bad = tmp_path / "bad.yaml"
    bad.write_text("jobs: [{name: x}]")
    assert run_simulate(str(bad)) == 2
    assert run_simulate(str(bad), policy="nope") == 2
    assert "unknown policy" in capsys.readouterr().err


def test_static_cache_changes_no_decision() -> None:
    class NoCache(Simulator):
        def snapshot(self) -> Snapshot:
            snap = super().snapshot()
            snap.static_cache = None
            return snap

    text = SCENARIO + "".join(
        f"  - {{name: extra{i}, team: {'xy'[i % 2]}, submit_at_s: {i * 7}, runtime_s: "
        f"{40 + i % 5 * 30}, resources: {{gpus: {1 + i % 3}}}}}\n"
        for i in range(40)
    )
    m = ScenarioModel.from_config(load_config_text(text))
    cached = to_json(Simulator(m, schedule).run())
    plain = to_json(NoCache(m, schedule).run())
    assert cached == plain
    assert cached["summary"]["finished"] > 40


def test_utilization_counts_runs_that_end_after_the_last_finish() -> None:
    """A run stopped after the last job finished (a preempted job left pending) held its
    cards until it stopped: utilization is a share of capacity over a span that covers
    it (it was 3.25 of the A100s' capacity here, measured over makespan_s alone)."""
    text = SCENARIO.split("jobs:")[0] + """
jobs:
  - {name: short, team: x, submit_at_s: 0, runtime_s: 50,
     resources: {gpus: 1, gpu_types: [a100-80g]}}
  - {name: long, team: y, submit_at_s: 0, runtime_s: 1000,
     resources: {gpus: 3, gpu_types: [a100-80g]}}
  - {name: late, team: x, submit_at_s: 200, runtime_s: 10, resources: {gpus: 9}}
"""

    def stop_long_at_200(snap: Snapshot) -> CycleResult:
        res = schedule(snap)
        if snap.now == 200 and any(r.request.id == "1" for r in snap.running):
            res.preemptions.append(Preemption("1", "test"))
        res.admissions = [a for a in res.admissions if not (a.job_id == "1" and snap.now > 0)]
        return res

    doc = to_json(Simulator(ScenarioModel.from_config(load_config_text(text)),
                            stop_long_at_200).run())
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["short"]["end_s"] == 50 and jobs["long"]["status"] == "pending"
    s = doc["summary"]
    assert s["makespan_s"] == 50  # as documented: a job left pending does not extend it
    # 10 CU x 50 s + 30 CU x 200 s over 40 CU x 200 s
    assert abs(s["utilization"]["a100-80g"] - (500 + 6000) / (40 * 200)) < 1e-6
    assert all(0 <= u <= 1 for u in s["utilization"].values())

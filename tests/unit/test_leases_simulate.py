"""`gpuq simulate` records lease_start, lease_end, preempt and reclaim with their
times, so a whole lease/preemption scenario can be checked from the result."""

import json

from app.domain.config import load_config_text
from app.simulate.all_policies import get_policy
from app.simulate.command import run_simulate
from app.simulate.replay import ScenarioModel, Simulator, to_json

SCENARIO = """
gpu_types: [{name: a100, memory_gb: 80, weight: 10}]
nodes: [{name: a, count: 2, gpu_type: a100, gpus: 4}]
pools:
  - {name: train, guaranteed: {a100: 40}, max_borrow_seconds: 600, reclaim: always}
  - {name: infer, guaranteed: {a100: 40}, max_borrow_seconds: 600, reclaim: always}
teams:
  - {name: t, pool: train}
  - {name: i, pool: infer}
scheduler: {min_run_time_s: 60, thrash_window_s: 10000}
jobs:
  - {name: base, team: t, priority: P1, resources: {gpus: 4}, submit_at_s: 0, runtime_s: 5000}
  - {name: borrow, team: t, priority: P1, resources: {gpus: 2}, submit_at_s: 10,
     runtime_s: 3000, duration_estimate_s: 3000}
  - {name: scav, team: i, priority: P2, resources: {gpus: 2}, submit_at_s: 20, runtime_s: 4000}
  - {name: urgent, team: i, priority: P0, resources: {gpus: 4}, submit_at_s: 900,
     runtime_s: 100}
"""


def events(doc, job=None, kind=None):
    return [e for e in doc["events"]
            if (job is None or e["job"] == job) and (kind is None or e["type"] == kind)]


def run_doc() -> dict:
    model = ScenarioModel.from_config(load_config_text(SCENARIO))
    return to_json(Simulator(model, get_policy("gpuq"), "gpuq").run())


def test_lease_reclaim_and_preempt_events_with_times() -> None:
    doc = run_doc()
    (start,) = events(doc, "borrow", "lease_start")
    assert start["t"] == 10 and start["lender"] == "infer" and start["units"] == 20
    assert start["expires_at"] == 610
    # reclaim: always, exactly at expiry, the lease ends as the job is reclaimed
    assert [(e["type"], e["t"]) for e in events(doc, "borrow")
            if e["type"] in ("lease_end", "reclaim")] == [("lease_end", 610), ("reclaim", 610)]
    # P0 takes its pool's guarantee back from the P2 job of the same pool
    (pre,) = events(doc, "scav", "preempt")
    assert pre["t"] == 900 and pre["by"] == "urgent" and "P0 > P2" in pre["reason"]
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["borrow"]["preemptions"] == 1 and jobs["scav"]["preemptions"] == 1
    assert all(j["status"] == "succeeded" for j in jobs.values())  # nobody lost


def test_cli_writes_the_events(tmp_path) -> None:
    path = tmp_path / "scenario.yaml"
    path.write_text(SCENARIO)
    out = tmp_path / "result.json"
    assert run_simulate(str(path), out=str(out)) == 0
    doc = json.loads(out.read_text())
    kinds = {e["type"] for e in doc["events"]}
    assert {"lease_start", "lease_end", "reclaim", "preempt", "admit", "finish"} <= kinds

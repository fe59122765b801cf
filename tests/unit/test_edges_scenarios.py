"""Edge cases as scenarios through ``gpuq simulate`` (virtual clock): a reclaimed
borrower, a lease converted to the own guarantee, a gang that never fits, cordoned
nodes, jobs that never started, the same percentiles as the reports.

Each scenario is a file run by the CLI entry point (``run_simulate``); the
result document is what an admin would read.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.domain.percentiles import percentile
from app.reports.fairness import group_stats
from app.reports.records import JobRecord
from app.simulate.command import run_simulate


def simulate(tmp_path: Path, scenario: str, policy: str = "gpuq") -> dict:
    sc = tmp_path / "scenario.yaml"
    sc.write_text(scenario)
    out = tmp_path / "result.json"
    assert run_simulate(str(sc), policy=policy, out=str(out)) == 0
    return json.loads(out.read_text())


# -- case 5: one percentile; jobs that never started count -------------------------

NOT_STARTED = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 2, cpu: 64, memory_gb: 512}
pools:
  - {name: p}
teams:
  - {name: x, pool: p}
  - {name: y, pool: p, quota_units: 5}
jobs:
  - {name: first, team: x, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}
  - {name: second, team: x, submit_at_s: 0, runtime_s: 300, resources: {gpus: 1}}
  - {name: blocker, team: x, submit_at_s: 100, runtime_s: 1000, resources: {gpus: 1}}
  - {name: never, team: y, submit_at_s: 100, runtime_s: 100, resources: {gpus: 1}}
"""


def test_summary_counts_jobs_that_never_started(tmp_path, capsys):
    doc = simulate(tmp_path, NOT_STARTED)
    jobs = {j["name"]: j for j in doc["jobs"]}
    # team y's quota (5 CU) is below one card (10 CU): the job waits to the end
    assert jobs["never"]["status"] == "pending" and jobs["never"]["start_s"] is None
    assert jobs["never"]["wait_s"] == 1000.0  # t=100 .. the run's end at t=1100
    s = doc["summary"]
    assert (s["jobs"], s["finished"], s["not_started"]) == (4, 3, 1)
    assert s["by_team"]["y"]["not_started"] == 1
    # waits 0, 0, 0, 1000: linear interpolation puts P99 at rank 2.97 -> 970
    # (the old nearest-rank P99 over started jobs only said 0)
    assert s["wait_p99_s"] == 970.0 and s["wait_p50_s"] == 0.0
    assert "1 not started" in capsys.readouterr().out


def test_simulator_and_reports_give_the_same_percentiles(tmp_path):
    """The simulator's summary and the API's fairness report, fed the same
    waits, agree (one implementation: app/domain/percentiles.py)."""
    doc = simulate(tmp_path, NOT_STARTED)
    waits = [j["wait_s"] for j in doc["jobs"]]
    records = [
        JobRecord(id=str(i), team="t", pool="p", priority="P1", gpu_type="a100-80g",
                  status="succeeded", submitted_at=0.0, wait_s=w, admitted_at=w,
                  finished_at=w + 1)
        for i, w in enumerate(waits)
    ]
    g = group_stats("team", "t", records)
    assert g.wait_p50_s == doc["summary"]["wait_p50_s"]
    assert g.wait_p99_s == pytest.approx(doc["summary"]["wait_p99_s"])
    assert doc["summary"]["wait_p99_s"] == pytest.approx(percentile(waits, 99))


# -- cases 1 and 2: leases ------------------------------------------------------------

LEASES = """
gpu_types:
  - {{name: a100-80g, memory_gb: 80, weight: 10}}
nodes:
  - {{name: a, count: 2, gpu_type: a100-80g, gpus: 8, cpu: 128, memory_gb: 1024}}
pools:
  - {{name: infer, guaranteed: {{a100-80g: 80}}, max_borrow_seconds: 1800, reclaim: {reclaim}}}
  - {{name: train, guaranteed: {{a100-80g: 80}}, max_borrow_seconds: 1800, reclaim: {reclaim}}}
teams:
  - {{name: serving, pool: infer}}
  - {{name: research, pool: train}}
jobs:
  - {{name: mate, team: serving, submit_at_s: 0, runtime_s: {mate}, resources: {{gpus: 8}}}}
  - {{name: borrower, team: serving, submit_at_s: 0, runtime_s: {borrower},
     resources: {{gpus: 2}}}}
"""


def test_case1_reclaimed_borrower_is_not_lent_again(tmp_path):
    """infer is full with its own 8-card job for 20,000 s; the 2-card job borrows
    train's guarantee, is reclaimed at 1,800 s, and then waits for infer's own
    guarantee instead of being lent (and killed) again every 600 s."""
    doc = simulate(tmp_path, LEASES.format(reclaim="always", mate=20_000, borrower=2_500))
    jobs = {j["name"]: j for j in doc["jobs"]}
    kinds = [e["type"] for e in doc["events"] if e["job"] == "borrower"]
    assert kinds.count("reclaim") == 1 and kinds.count("lease_start") == 1
    b = jobs["borrower"]
    assert b["status"] == "succeeded" and b["preemptions"] == 1
    assert b["start_s"] == 20_000 and b["end_s"] == 22_500  # on infer's own guarantee
    assert b["allocations"] and all(a["gpu_type"] == "a100-80g" for a in b["allocations"])


def test_case2_lease_converted_when_own_guarantee_frees_up(tmp_path):
    """The pool-mate finishes at t=1,000: the borrowed 2 cards now fit in infer's
    own guarantee, so the lease is returned then and the job runs to 3,100 s
    (it used to be reclaimed at 1,800 s and end at 5,500 s)."""
    for reclaim in ("always", "when_needed"):
        doc = simulate(tmp_path, LEASES.format(reclaim=reclaim, mate=1_000, borrower=3_100))
        b = {j["name"]: j for j in doc["jobs"]}["borrower"]
        assert (b["status"], b["start_s"], b["end_s"], b["preemptions"]) == (
            "succeeded", 0, 3_100, 0)
        (end,) = [e for e in doc["events"]
                  if e["job"] == "borrower" and e["type"] == "lease_end"]
        assert end["t"] == 1_000 and end["state"] == "returned"
        assert "own guarantee" in end["reason"]
        assert not [e for e in doc["events"] if e["type"] == "reclaim"]


# -- case 3: unschedulable on the full inventory ---------------------------------------

DEMO = (Path(__file__).resolve().parents[2] / "app" / "config" / "demo.yaml").read_text()


def test_case3_demo_gang_of_two_whole_nodes_gets_a_true_verdict(tmp_path):
    """The demo has 15 whole A100s (a100-0's device 0 is cut into MIG slices): a
    P0 gang of 2 x 8 whole cards can never run. It used to wait forever with
    "largest free block: a100-80g 1"; now the verdict says what is missing."""
    doc = simulate(tmp_path, DEMO + """
jobs:
  - {name: big, team: recsys, priority: P0, submit_at_s: 0, runtime_s: 100, replicas: 2,
     min_available: 2, resources: {gpus: 8, gpu_types: [a100-80g]}}
  - {name: one-node, team: nlp, submit_at_s: 0, runtime_s: 100,
     resources: {gpus: 8, gpu_types: [a100-80g]}}
""")
    jobs = {j["name"]: j for j in doc["jobs"]}
    big = jobs["big"]
    assert big["status"] == "unschedulable"
    assert big["reason"].startswith(
        "needs 2 replicas x 8 whole a100-80g GPU(s) at once; the whole cluster holds at most 1")
    assert "a100-1 holds 1 with 8 whole card(s)" in big["reason"]
    assert "a100-0 holds 0 with 7 whole card(s) + 1 MIG-cut" in big["reason"]
    assert jobs["one-node"]["status"] == "succeeded"  # a single 8-card replica fits a100-1


CORDONED = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10,
     mig_profiles: {"3g.40gb": {memory_gb: 40, compute_fraction: 0.4286}}}
  - {name: v100-16g, memory_gb: 16, weight: 4}
nodes:
  - {name: a100, count: 2, gpu_type: a100-80g, gpus: 8, cpu: 128, memory_gb: 1024,
     schedulable: false}
  - {name: v100, count: 1, gpu_type: v100-16g, gpus: 8, cpu: 128, memory_gb: 1024}
  - {name: cut, count: 1, gpu_type: a100-80g, gpus: 2, cpu: 128, memory_gb: 1024,
     mig_layout: ["3g.40gb", "3g.40gb"]}
  - {name: thin, count: 1, gpu_type: v100-16g, gpus: 8, cpu: 4, memory_gb: 1024}
pools:
  - {name: p}
teams:
  - {name: t, pool: p}
jobs:
  - {name: waits-for-upgrade, team: t, submit_at_s: 0, runtime_s: 100,
     resources: {gpus: 4, gpu_types: [a100-80g]}}
  - {name: v100-runs, team: t, submit_at_s: 0, runtime_s: 100,
     resources: {gpus: 4, gpu_types: [v100-16g]}}
  - {name: too-big, team: t, submit_at_s: 0, runtime_s: 100,
     resources: {gpus: 9, gpu_types: [a100-80g]}}
  - {name: cpu-per-node, team: t, submit_at_s: 0, runtime_s: 100, replicas: 2,
     min_available: 2, resources: {gpus: 8, cpu: 64, gpu_types: [v100-16g]}}
"""


def test_case3_cordoned_nodes_are_inventory(tmp_path):
    """A job that only cordoned (upgrading) nodes could hold waits with a reason
    that names them; it is not `unschedulable`. A request no node could ever
    hold is, with the reason counting what the cluster has."""
    doc = simulate(tmp_path, CORDONED)
    jobs = {j["name"]: j for j in doc["jobs"]}
    w = jobs["waits-for-upgrade"]
    assert w["status"] == "pending" and w["start_s"] is None
    assert w["reason"].startswith(
        "waits for nodes that are cordoned or not ready (a100-0, a100-1): ")
    assert jobs["v100-runs"]["status"] == "succeeded"
    t = jobs["too-big"]
    assert t["status"] == "unschedulable"
    assert "has 9 whole GPU(s)" in t["reason"]
    # two 8-card V100 replicas: "thin" has the cards but 4 CPUs, so only one node fits
    c = jobs["cpu-per-node"]
    assert c["status"] == "unschedulable" and "holds at most 1" in c["reason"]
    assert doc["summary"]["not_started"] == 3

"""Issue 11's cases as scenarios through ``gpuq simulate`` (virtual clock).

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

"""What a preempted or reclaimed job is told: the preemption's own sentence once,
then, once a cycle has looked at it, why it waits *now*, counted the way the
placement counts (a gang takes one GPU type unless allow_mixed_types; a spread
gang one replica per node)."""

from __future__ import annotations

import json
from dataclasses import replace

from app.scheduling.engine import schedule
from app.scheduling.leases import reclaim_at_expiry
from app.scheduling.model import LeaseInfo, PoolInfo, Preemption, ReplicaPlacement, RunningJob
from app.scheduling.preemption import stop_sentence
from app.simulate.command import run_simulate
from tests.unit.quota_sim import job, node, running, snapshot

POOLS = [PoolInfo("p")]


def _gang_on(req, node_name, t, devices_per_replica, started_at=0.0):
    w = 10 if t == "a100" else 4
    return RunningJob(req, tuple(
        ReplicaPlacement(r, node_name, t, d, units=w * len(d), cpu=1, memory_gb=1)
        for r, d in enumerate(devices_per_replica)
    ), started_at)


def test_preempted_gang_is_told_why_it_waits_now() -> None:
    """A P2 gang of 2 x 4 cards (any type) on the a100 node is preempted for a P0
    job of 4 a100; a 4-card block is then free on each node, but a gang does not
    mix types, so it waits for a second block of one type. It used to read "free GPU
    blocks exist (a100 4, v100 4) but not with 1 CPU and 1 GB memory free on the
    same node, or they are reserved": neither was why it waited."""
    gang = job("gang", prio="P2", gpus=4, replicas=2, min_available=2)
    fill = job("fill", prio="P2", gpus=4, gpu_types=("v100",))
    urgent = job("urgent", prio="P0", gpus=4, gpu_types=("a100",))
    nodes = [node("a0", "a100", 8), node("v0", "v100", 8)]
    run = [_gang_on(gang, "a0", "a100", [(0, 1, 2, 3), (4, 5, 6, 7)]),
           running(fill, "v0", "v100", (0, 1, 2, 3))]
    res = schedule(snapshot(nodes, POOLS, [urgent], run, now=1000))
    [pre] = res.preemptions
    assert (pre.job_id, pre.by_job) == ("gang", "urgent")
    # the whole sentence, the preemptor named once (the dispatcher writes it as is)
    assert pre.reason == "preempted by job urgent (P0 > P2)"
    [adm] = res.admissions
    # the next cycle: the gang is pending again, the P0 job holds 4 a100 cards
    requeued = replace(gang, preemption_count=1, last_preempted_by="urgent",
                       last_preempted_at=1000.0)
    run2 = [run[1], RunningJob(urgent, adm.placements, 1000.0)]
    res2 = schedule(snapshot(nodes, POOLS, [requeued], run2, now=1001))
    why = res2.reasons["gang"]
    assert "CPU" not in why and "free GPU blocks exist" not in why
    assert "free 4-card blocks of one GPU type: at most 1 of 2 needed (a100 1, v100 1;" in why
    assert "allow_mixed_types" in why
    # allowed to mix, the same gang runs at once: the reason told the truth
    mixed = replace(requeued, allow_mixed_types=True)
    res3 = schedule(snapshot(nodes, POOLS, [mixed], run2, now=1001))
    assert [a.job_id for a in res3.admissions] == ["gang"]


def test_spread_gang_counts_nodes_not_blocks() -> None:
    """A spread gang puts one replica per node: one node with 8 free cards holds one
    4-card replica of it, not two."""
    gang = job("gang", prio="P2", gpus=4, replicas=2, min_available=2, placement="spread",
              gpu_types=("a100",))
    res = schedule(snapshot([node("a0", "a100", 8), node("a1", "a100", 8)], POOLS, [gang],
                            [running(job("other", gpus=8), "a1", "a100", tuple(range(8)))],
                            now=10))
    why = res.reasons["gang"]
    assert "nodes with 4 free card(s): 1 of 2 needed (spread: one replica per node)" in why
    assert "CPU" not in why


def test_plain_gang_reason_unchanged_in_shape() -> None:
    """One allowed type, binpack: blocks are counted across nodes as before."""
    gang = job("gang", gpus=4, replicas=2, min_available=2, gpu_types=("a100",))
    res = schedule(snapshot([node("a0", "a100", 4), node("a1", "a100", 4)], POOLS, [gang],
                            [running(job("other", gpus=4), "a1", "a100", (0, 1, 2, 3))],
                            now=10))
    assert res.reasons["gang"].endswith(
        "largest free block: a100 4; free 4-card blocks: 1 of 2 needed")


def test_lease_reasons_name_durations_not_epoch_instants() -> None:
    """Live, the core's clock is epoch seconds: "expired at t=1.76457e+09" said nothing."""
    now = 1_764_570_000.0
    x = LeaseInfo("7", "p", "q", "a100", 20.0, "y", now - 1800, now)
    y = job("y", gpus=2)
    r = RunningJob(y, (ReplicaPlacement(0, "a0", "a100", (0, 1), units=20),), now - 1800,
                   (x,))
    pools = [PoolInfo("p", guaranteed={"a100": 80}, reclaim="always", max_borrow_seconds=1800),
             PoolInfo("q", guaranteed={"a100": 80}, reclaim="always", max_borrow_seconds=1800)]
    [pre] = reclaim_at_expiry(snapshot([node("a0", "a100", 8)], pools, [], [r], now=now))
    assert pre.reason == (
        "reclaimed: lease 7 (20 CU of a100 borrowed from pool q for 1800 s) expired "
        "(reclaim: always)"
    )
    assert "e+09" not in pre.reason and "t=" not in pre.reason


def test_stop_sentence_names_the_preemptor_once() -> None:
    """The event text is composed in one place: a reason that already says what
    happened is kept, any other gets the verb and the preemptor in front."""
    cases = [
        (Preemption("g", "preempted by job 9 (P0 > P1)", "9"), "preempted by job 9 (P0 > P1)"),
        (Preemption("g", "descheduler (room for P0): preempted by job 9 (P0 > P2)", "9"),
         "descheduler (room for P0): preempted by job 9 (P0 > P2)"),
        (Preemption("g", "descheduler: moved off node a0 so job 9 can have the whole node",
                    "9"), "descheduler: moved off node a0 so job 9 can have the whole node"),
        (Preemption("g", "reclaimed: lease 3 (...) expired (reclaim: always)", None, "reclaim"),
         "reclaimed: lease 3 (...) expired (reclaim: always)"),
        (Preemption("g", "kueue: fair sharing on a100 for team x", "9"),
         "preempted by job 9: kueue: fair sharing on a100 for team x"),
        # "job 12" is not "job 1"
        (Preemption("g", "room for job 12", "1", "reclaim"), "reclaimed by job 1: room for job 12"),
    ]
    for p, said in cases:
        assert stop_sentence(p) == said


SCENARIO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10,
     mig_profiles: {"3g.40gb": {memory_gb: 40, compute_fraction: 0.4286}}}
nodes:
  - {name: a, count: 2, gpu_type: a100-80g, gpus: 8, cpu: 128, memory_gb: 1024}
pools:
  - {name: infer, guaranteed: {a100-80g: 80}, max_borrow_seconds: 1800, reclaim: always}
  - {name: train, guaranteed: {a100-80g: 80}, max_borrow_seconds: 1800, reclaim: always}
teams:
  - {name: serving, pool: infer}
jobs:
  - {name: mate, team: serving, submit_at_s: 0, runtime_s: 20000, resources: {gpus: 8}}
  - {name: borrower, team: serving, submit_at_s: 0, runtime_s: 2500, resources: {gpus: 2}}
  - {name: slice, team: serving, submit_at_s: 0, runtime_s: 10, resources: {mig: 7g.80gb}}
"""


def test_simulated_reclaim_and_verdict_read_well(tmp_path) -> None:
    """`gpuq simulate` events and verdicts as a person reads them: the reclaim names
    the lease once ("lease lease-1" before), a MIG verdict has no ">= 0 GB"."""
    sc = tmp_path / "s.yaml"
    sc.write_text(SCENARIO)
    out = tmp_path / "r.json"
    assert run_simulate(str(sc), policy="gpuq", out=str(out)) == 0
    doc = json.loads(out.read_text())
    [reclaim] = [e for e in doc["events"] if e["type"] == "reclaim"]
    assert reclaim["reason"] == (
        "reclaimed: lease-1 (20 CU of a100-80g borrowed from pool train for 1800 s) expired "
        "(reclaim: always)"
    )
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["slice"]["status"] == "unschedulable"
    assert jobs["slice"]["reason"] == "MIG profile 7g.80gb is not defined for a100-80g"


def test_job_waiting_out_a_victims_minimum_run_time_is_told_so() -> None:
    """A P1 job whose only possible victim (P2) started 10 s ago waits 50 s more;
    it used to read only "largest free block: a100 0". A job of another GPU type,
    or of the same priority, gets no such note: nobody could be preempted for it."""
    fresh = job("fresh", prio="P2", gpus=8)
    run = [running(fresh, "a0", "a100", tuple(range(8)), started_at=990.0)]
    nodes = [node("a0", "a100", 8), node("v0", "v100", 8)]
    busy_v = running(job("v", prio="P2", gpus=8, gpu_types=("v100",)), "v0", "v100",
                     tuple(range(8)), started_at=0.0)
    waiting = job("j", prio="P1", gpus=8, gpu_types=("a100",))
    peer = job("peer", prio="P2", gpus=8, gpu_types=("a100",))
    res = schedule(snapshot(nodes, POOLS, [waiting, peer], [*run, busy_v], now=1000,
                            min_run_time_s=60))
    assert res.preemptions == []
    assert res.reasons["j"].endswith(
        "largest free block: a100 0; lower-priority job(s) fresh ran less than "
        "min_run_time_s (60 s): may be preempted for it in 50 s")
    assert "min_run_time_s" not in res.reasons["peer"]
    # 50 s later it is: the note told the truth
    res = schedule(snapshot(nodes, POOLS, [waiting], [*run, busy_v], now=1050,
                            min_run_time_s=60))
    assert [(p.job_id, p.by_job) for p in res.preemptions] == [("fresh", "j")]

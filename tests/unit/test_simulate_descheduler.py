"""Descheduler ticks in the replay: the live service's second loop, in virtual time."""

from __future__ import annotations

import json
import random

from app.domain.config import load_config_text
from app.simulate.all_policies import get_policy
from app.simulate.replay import ScenarioModel, Simulator, to_json
from tests.unit.test_baselines_fifo import _Checking

HEAD = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
nodes:
  - {name: a, count: %(nodes)d, gpu_type: a100-80g, gpus: 4, cpu: 64, memory_gb: 512}
pools:
  - {name: p, placement: %(placement)s}
teams:
  - {name: x, pool: p}
  - {name: y, pool: p}
scheduler: {descheduler: %(on)s}
jobs:
"""


def scenario(jobs: str, *, on: bool = True, nodes: int = 2, placement: str = "binpack") -> str:
    return HEAD % {"nodes": nodes, "placement": placement, "on": str(on).lower()} + jobs


def replay(text: str, cls: type[Simulator] = Simulator, policy: str = "gpuq") -> dict:
    model = ScenarioModel.from_config(load_config_text(text))
    return to_json(cls(model, get_policy(policy), policy).run())


def small(name: str, prio: str, t: float = 0, run: float = 1000, gpus: int = 1) -> str:
    return (f"  - {{name: {name}, team: x, priority: {prio}, submit_at_s: {t}, "
            f"runtime_s: {run}, resources: {{gpus: {gpus}}}}}\n")


# Four one-card P1 jobs spread two per node; a whole-node P1 job arrives at t=10. The
# core may not preempt equals, so only a defragment move can start it before t=1000.
FRAGMENTED = "".join(small(f"s{i}", "P1") for i in range(4)) + small(
    "whole", "P1", t=10, run=100, gpus=4
)


def by_name(doc: dict) -> dict[str, dict]:
    return {j["name"]: j for j in doc["jobs"]}


def test_defragment_tick_starts_whole_node_job_that_waits_without_it() -> None:
    on = replay(scenario(FRAGMENTED, placement="spread"))
    off = replay(scenario(FRAGMENTED, on=False, placement="spread"))

    # off: the whole-node job waits for the small jobs to finish
    assert by_name(off)["whole"]["start_s"] == 1000.0
    assert off["summary"]["descheduler_ticks"] == 0
    assert not [e for e in off["events"] if e["type"] == "preempt"]

    # on: the tick at t=30 may not move jobs that ran < min_run_time_s (60 s); t=60 does
    whole = by_name(on)["whole"]
    assert whole["start_s"] == 60.0 and whole["wait_s"] == 50.0
    moves = [e for e in on["events"] if e["type"] == "preempt"]
    assert len(moves) == 2
    assert all(e["t"] == 60.0 and e["by"] == "whole" for e in moves)
    assert all(e["reason"].startswith("descheduler: moved off node") for e in moves)
    freed = {a["node"] for a in whole["allocations"]}
    assert len(freed) == 1
    for e in moves:  # each moved job is admitted again at once, on the other node
        j = by_name(on)[e["job"]]
        assert j["start_s"] == 60.0 and j["wait_s"] == 0.0 and j["preemptions"] == 1
        assert {a["node"] for a in j["allocations"]}.isdisjoint(freed)
        admits = [x for x in on["events"] if x["job"] == e["job"] and x["type"] == "admit"]
        assert [x["t"] for x in admits] == [0.0, 60.0]
    assert on["summary"]["descheduler_ticks"] == 2
    assert on["summary"]["finished"] == 5


def test_p0_room_tick_evicts_p2_before_the_next_core_wake() -> None:
    jobs = "".join(small(f"s{i}", "P2") for i in range(8)) + small(
        "urgent", "P0", t=10, run=100, gpus=2
    )
    on, off = replay(scenario(jobs)), replay(scenario(jobs, on=False))
    # the P2 work is younger than min_run_time_s at t=10: nothing may be evicted then
    assert by_name(off)["urgent"]["start_s"] == 70.0  # the core's 60 s wake-up
    assert by_name(on)["urgent"]["start_s"] == 60.0  # the descheduler's second tick
    evicted = [e for e in on["events"] if e["type"] == "preempt"]
    assert len(evicted) == 2
    assert all(e["reason"].startswith("descheduler (room for P0): preempted by job")
               for e in evicted)


def test_baselines_get_no_descheduler() -> None:
    doc = replay(scenario(FRAGMENTED, placement="spread"), policy="fifo-typed")
    assert doc["summary"]["descheduler_ticks"] == 0
    assert not [e for e in doc["events"] if e["type"] == "preempt"]


def test_ticks_stop_with_the_running_work_and_the_replay_ends() -> None:
    # a whole-node P0 job its team's quota never lets start stays pending for good; the
    # descheduler ticks only while something runs that it could evict or move
    text = scenario(
        small("held", "P0", gpus=4).replace("team: x", "team: y")
        + small("worker", "P2", run=300)
    ).replace("{name: y, pool: p}", "{name: y, pool: p, quota_units: 20}")
    doc = replay(text)
    assert by_name(doc)["held"]["status"] == "pending"
    assert by_name(doc)["worker"]["status"] == "succeeded"
    assert 1 <= doc["summary"]["descheduler_ticks"] <= 300 / 30
    assert not [e for e in doc["events"] if e["type"] == "preempt"]


class _CheckingTicks(_Checking):
    """Re-checks the cluster after every cycle and after every descheduler tick."""

    ticks_checked = 0

    def descheduler_tick(self) -> bool:
        changed = super().descheduler_tick()
        self.check()
        self.ticks_checked += 1
        return changed


def random_jobs(seed: int, n: int = 30) -> str:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        prio = rng.choice(["P0", "P1", "P2", "P2"])
        gpus = rng.choice([1, 1, 2, 4])
        out.append(
            f"  - {{name: j{i}, team: {rng.choice('xy')}, priority: {prio}, "
            f"submit_at_s: {rng.randint(0, 600)}, runtime_s: {rng.randint(30, 900)}, "
            f"resources: {{gpus: {gpus}}}}}\n"
        )
    return "".join(out)


def check_lifecycles(doc: dict) -> None:
    """Every job ends in exactly one terminal state or is still queued, and its events
    alternate: admitted only while stopped, stopped only while running."""
    events: dict[str, list[str]] = {j["name"]: [] for j in doc["jobs"]}
    for e in doc["events"]:
        if e["type"] in ("admit", "preempt", "reclaim", "finish", "fail"):
            events[e["job"]].append(e["type"])
    for j in doc["jobs"]:
        running = False
        for i, kind in enumerate(events[j["name"]]):
            if kind == "admit":
                assert not running, j["name"]
                running = True
            else:
                assert running, (j["name"], kind)
                running = False
                if kind == "finish":
                    assert i == len(events[j["name"]]) - 1, j["name"]
        assert j["status"] in ("succeeded", "failed", "unschedulable", "pending"), j["name"]
        assert (events[j["name"]][-1:] == ["finish"]) == (j["status"] == "succeeded")
        assert not running, j["name"]  # the replay runs every job to an end


def test_random_scenarios_deterministic_no_over_allocation_after_ticks() -> None:
    moved = ticks = 0
    for seed in range(6):
        text = scenario(random_jobs(seed), nodes=3, placement="spread")
        model = ScenarioModel.from_config(load_config_text(text))
        sim = _CheckingTicks(model, get_policy("gpuq"), "gpuq", seed)
        a = to_json(sim.run())
        b = replay(text)
        assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), seed
        check_lifecycles(a)
        assert sim.ticks_checked >= a["summary"]["descheduler_ticks"]
        ticks += a["summary"]["descheduler_ticks"]
        moved += sum(
            1 for e in a["events"]
            if e["type"] == "preempt" and e["reason"].startswith("descheduler")
        )
    assert ticks > 0 and moved > 0  # the generated load does exercise the descheduler

"""Baselines fifo-count / fifo-typed and the simulator's out-of-memory rule."""

from __future__ import annotations

import json
import random

from app.domain.config import load_config_text
from app.scheduling.state import ClusterState, device_overcommitted
from app.simulate.all_policies import POLICIES
from app.simulate.baselines.fifo import fifo_count, fifo_typed
from app.simulate.replay import OOM_AFTER_S, ScenarioModel, Simulator, to_json

SCENARIO = """
gpu_types:
  - {name: v100-16g, memory_gb: 16, weight: 4}
  - {name: a100-80g, memory_gb: 80, weight: 10}
  - {name: rtx4090-24g, memory_gb: 24, weight: 2, shareable: true}
nodes:
  - {name: n1-v, count: 1, gpu_type: v100-16g, gpus: 2, cpu: 32, memory_gb: 256}
  - {name: n2-a, count: 1, gpu_type: a100-80g, gpus: 2, cpu: 32, memory_gb: 256}
  - {name: n3-r, count: 1, gpu_type: rtx4090-24g, gpus: 2, cpu: 32, memory_gb: 256}
pools:
  - {name: p}
teams:
  - {name: x, pool: p}
jobs:
  - {name: needs-40g, team: x, submit_at_s: 0, runtime_s: 1000,
     resources: {gpus: 1, min_gpu_memory_gb: 40}}
"""


def _model(text: str = SCENARIO) -> ScenarioModel:
    return ScenarioModel.from_config(load_config_text(text))


def test_registered_by_name():
    assert POLICIES["fifo-count"] is fifo_count and POLICIES["fifo-typed"] is fifo_typed


def test_fifo_count_lands_on_too_small_card_and_is_requeued_three_times():
    """Out of memory 60 s after each start, requeued at most 3 times, then ``failed``:
    four runs (the old code gave up after the third run, two requeues)."""
    doc = to_json(Simulator(_model(), fifo_count, "fifo-count").run())
    (job,) = doc["jobs"]
    assert job["status"] == "failed"
    assert job["allocations"][0]["gpu_type"] == "v100-16g"  # first node, memory ignored
    fails = [e for e in doc["events"] if e["type"] == "fail"]
    assert [e["t"] for e in fails] == [k * OOM_AFTER_S for k in (1, 2, 3, 4)]
    admits = [e for e in doc["events"] if e["type"] == "admit"]
    assert len(admits) == 4  # the first start and 3 requeues
    assert job["end_s"] == 4 * OOM_AFTER_S
    assert doc["summary"]["restarts"] == 4 and doc["summary"]["failed"] == 1


def test_fifo_typed_and_gpuq_respect_memory():
    for name in ("fifo-typed", "gpuq"):
        doc = to_json(Simulator(_model(), POLICIES[name], name).run())
        (job,) = doc["jobs"]
        assert job["status"] == "succeeded", name
        assert job["allocations"][0]["gpu_type"] == "a100-80g"
        assert job["end_s"] == 1000


def test_fifo_ignores_priority_and_skips_what_does_not_fit():
    text = SCENARIO.split("jobs:")[0] + """
jobs:
  - {name: first, team: x, submit_at_s: 0, runtime_s: 100, resources: {gpus: 2}}
  - {name: too-big, team: x, submit_at_s: 1, runtime_s: 100, resources: {gpus: 2}, priority: P0}
  - {name: small, team: x, submit_at_s: 2, runtime_s: 100, resources: {gpu_share: 0.5}}
"""
    doc = to_json(Simulator(_model(text), fifo_typed, "fifo-typed").run())
    jobs = {j["name"]: j for j in doc["jobs"]}
    assert jobs["first"]["start_s"] == 0
    # no head-of-line blocking: too-big fits on a later node, small shares a 4090
    assert jobs["too-big"]["start_s"] == 1
    assert jobs["small"]["start_s"] == 2
    assert jobs["small"]["allocations"][0]["share"] == 0.5
    count = to_json(Simulator(_model(text), fifo_count, "fifo-count").run())
    small = next(j for j in count["jobs"] if j["name"] == "small")
    assert small["allocations"][0]["share"] == 0  # a share takes a whole card there


def _random_scenario(seed: int) -> str:
    rng = random.Random(seed)
    lines = [SCENARIO.split("jobs:")[0], "jobs:"]
    for i in range(25):
        kind = rng.random()
        if kind < 0.4:
            res = f"{{gpus: {rng.choice([0, 1, 2])}, cpu: {rng.choice([1, 8, 16])}}}"
        elif kind < 0.7:
            res = f"{{gpu_share: {rng.choice([0.25, 0.5, 0.75])}}}"
        elif kind < 0.85:
            res = f"{{gpus: 1, min_gpu_memory_gb: {rng.choice([10, 20, 40])}}}"
        else:
            res = f"{{gpu_units: {rng.choice([4, 8, 12])}}}"
        lines.append(
            f"  - {{name: j{i}, team: x, submit_at_s: {rng.randint(0, 300)}, "
            f"runtime_s: {rng.randint(10, 400)}, resources: {res}}}"
        )
    return "\n".join(lines) + "\n"


class _Checking(Simulator):
    """Re-checks the cluster after every cycle: no card, CPU or memory handed out twice."""

    def cycle(self) -> bool:
        changed = super().cycle()
        self.check()
        return changed

    def check(self) -> None:
        state = ClusterState.from_snapshot(self.snapshot())
        for node in state.nodes.values():
            assert node.cpu_used <= node.cpu + 1e-9 and node.memory_used_gb <= node.memory_gb + 1e-9
            for d in node.devices:
                assert not device_overcommitted(d), node.name


def test_no_over_allocation_and_deterministic_for_every_policy():
    for seed in range(4):
        text = _random_scenario(seed)
        for name, policy in POLICIES.items():
            a = to_json(_Checking(_model(text), policy, name, seed).run())
            b = to_json(Simulator(_model(text), policy, name, seed).run())
            assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True), name
            assert a["summary"]["jobs"] == 25


def test_bestfit_packs_and_random_is_seeded():
    text = SCENARIO.split("nodes:")[0] + """nodes:
  - {name: a, count: 3, gpu_type: a100-80g, gpus: 4, cpu: 32, memory_gb: 256}
pools:
  - {name: p}
teams:
  - {name: x, pool: p}
jobs:
""" + "".join(
        f"  - {{name: j{i}, team: x, submit_at_s: {i}, runtime_s: 1000, resources: {{gpus: 1}}}}\n"
        for i in range(4)
    )
    doc = to_json(Simulator(_model(text), POLICIES["bestfit"], "bestfit").run())
    assert {a["node"] for j in doc["jobs"] for a in j["allocations"]} == {"a-0"}  # packed
    runs = [to_json(Simulator(_model(text), POLICIES["random"], "random").run()) for _ in range(2)]
    assert runs[0] == runs[1]
    nodes = {a["node"] for j in runs[0]["jobs"] for a in j["allocations"]}
    assert len(nodes) > 1  # spread at random over the three nodes

"""The fluid LP lower bound of mean JCT (app/simulate/bound.py)."""

from __future__ import annotations

import pytest

from app.domain.config import load_config_text
from app.simulate.all_policies import make_policy
from app.simulate.bound import gap, lower_bound, share_closed
from app.simulate.replay import ScenarioModel, Simulator, to_json

pytest.importorskip("scipy", reason="the LP bound needs scipy (pip install -e '.[eval]')")

TWO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
  - {name: v100-32g, memory_gb: 32, weight: 4}
nodes:
  - {name: a, gpu_type: a100-80g, gpus: 1, cpu: 8, memory_gb: 64}
pools: [{name: p}]
teams: [{name: t, pool: p}]
jobs:
  - {name: j1, team: t, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}
  - {name: j2, team: t, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}
"""


def _model(text: str) -> ScenarioModel:
    return ScenarioModel.from_config(load_config_text(text))


def test_two_jobs_on_one_card_bound_is_the_optimum():
    # one after the other: JCTs 100 and 200, mean 150 -- the fluid bound reaches it
    b = lower_bound(_model(TWO))
    assert 149.0 <= b.jct_mean_s <= 150.0 + 1e-6
    assert b.jobs == 2


def test_speed_and_memory_enter_the_bound():
    # j1 runs twice as fast on the A100; j2 needs 40 GB, so only the A100 fits it
    text = TWO.replace(
        "nodes:\n", "nodes:\n  - {name: v, gpu_type: v100-32g, gpus: 1, cpu: 8, memory_gb: 64}\n"
    ).replace("runtime_s: 100, resources: {gpus: 1}}\n  - {name: j2",
              "runtime_s: 100, speed: {a100-80g: 2}, resources: {gpus: 1}}\n  - {name: j2"
    ).replace("name: j2, team: t, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}",
              "name: j2, team: t, submit_at_s: 0, runtime_s: 100,"
              " resources: {gpus: 1, min_gpu_memory_gb: 40}")
    b = lower_bound(_model(text))
    # best schedule: j2 on the A100, j1 on the V100, at once: mean 100. The fluid bound
    # credits j1 with half its A100 run time as its tail (q/2 = 25 s): (75 + 100) / 2
    assert 87.0 <= b.jct_mean_s <= 87.5 + 1e-6
    # without the speed table j1 gains nothing from the A100: the bound is the optimum
    slow = lower_bound(_model(text.replace(", speed: {a100-80g: 2}", "")))
    assert 99.0 <= slow.jct_mean_s <= 100.0 + 1e-6


@pytest.mark.parametrize("policy", ["gpuq", "fifo-typed", "slurm"])
def test_no_policy_beats_the_bound(policy):
    jobs = "\n".join(
        f"  - {{name: x{i}, team: t, submit_at_s: {i * 37 % 400}, runtime_s: {50 + i * 13 % 300},"
        f" resources: {{gpus: {1 + i % 3}}}}}" for i in range(30))
    text = TWO.split("jobs:")[0].replace("gpus: 1, cpu: 8", "gpus: 4, cpu: 64") + "jobs:\n" + jobs
    model = _model(text)
    b = lower_bound(model)
    got = to_json(Simulator(model, make_policy(policy), policy).run())["summary"]["jct_mean_s"]
    assert b.jct_mean_s <= got + 1e-6


def test_gap_and_share_closed():
    assert gap(150.0, 100.0) == pytest.approx(0.5)
    assert share_closed(120.0, 140.0, 100.0) == pytest.approx(0.5)
    assert share_closed(120.0, 100.0, 100.0) is None  # the best is at the bound: nothing to close

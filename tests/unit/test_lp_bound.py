"""The LP lower bound of mean JCT (app/simulate/bound.py): below every policy's mean JCT,
whole jobs and fluid ones alike."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.domain.config import load_config_text
from app.simulate import bound
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
    # best schedule: j2 on the A100, j1 on the V100, at once: mean 100. Both runs are long
    # against a slot, so the LP keeps them whole and reaches it, but for the release slot
    # (j1 could start at 0 on the A100 and end at 50 only by sharing it with j2)
    assert b.whole_jobs == 2
    assert 99.0 <= b.jct_mean_s <= 100.0 + 1e-6
    # a fluid j1 would be credited with half its A100 run time as its tail (q/2 = 25 s)
    assert lower_bound(_model(text), slots=2).jct_mean_s <= b.jct_mean_s
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


def test_a_whole_job_is_not_split_around_a_short_one(monkeypatch: pytest.MonkeyPatch) -> None:
    # one card; a 1,000 s job at 0 and a 100 s job at 500. Split in time (fluid), the
    # short job runs at once and the long one ends at 1,100: mean 600. No schedule here
    # can do that: a run that stops starts over, so the best is the long job first, the
    # short one at 1,000 (JCTs 1,000 and 600: mean 800)
    text = TWO.replace(
        "  - {name: j1, team: t, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}\n"
        "  - {name: j2, team: t, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}\n",
        "  - {name: j1, team: t, submit_at_s: 0, runtime_s: 1000, resources: {gpus: 1}}\n"
        "  - {name: j2, team: t, submit_at_s: 500, runtime_s: 100, resources: {gpus: 1}}\n")
    whole = lower_bound(_model(text))
    assert whole.whole_jobs == 2
    assert 700.0 <= whole.jct_mean_s <= 800.0 + 1e-6  # an LP: starts may be fractional
    monkeypatch.setattr(bound, "WHOLE_MIN_SLOTS", 10**9)  # every job fluid
    fluid = lower_bound(_model(text))
    assert fluid.whole_jobs == 0 and fluid.jct_mean_s <= 600.0 + 1e-6


@st.composite
def scenarios(draw: st.DrawFn) -> str:
    """A small mixed cluster and a burst of jobs: whole and fluid ones, gangs of two
    replicas, type lists, memory floors, speeds, runs short and long against a slot."""
    nodes = [
        f"  - {{name: a{i}, gpu_type: a100-80g, gpus: {draw(st.integers(1, 2))}, cpu: 64,"
        f" memory_gb: 512}}" for i in range(draw(st.integers(1, 2)))] + [
        f"  - {{name: v{i}, gpu_type: v100-32g, gpus: {draw(st.integers(1, 2))}, cpu: 64,"
        f" memory_gb: 512}}" for i in range(draw(st.integers(0, 1)))]
    jobs = []
    for i in range(draw(st.integers(2, 10))):
        gpus = draw(st.integers(1, 2))  # nodes of 1-2 cards: work queues
        res = f"gpus: {gpus}"
        if draw(st.booleans()):
            res += ", min_gpu_memory_gb: 40"  # the A100s only
        gang = ", replicas: 2, min_available: 2" if draw(st.integers(0, 4)) == 0 else ""
        speed = ", speed: {a100-80g: 2}" if draw(st.booleans()) else ""
        run = draw(st.sampled_from([5, 60, 600, 1_200, 3_000]))
        team = draw(st.sampled_from(["t", "u"]))
        jobs.append(f"  - {{name: j{i}, team: {team}, submit_at_s: {draw(st.integers(0, 300))},"
                    f" runtime_s: {run}{speed}{gang}, resources: {{{res}}}}}")
    return ("gpu_types:\n  - {name: a100-80g, memory_gb: 80, weight: 10}\n"
            "  - {name: v100-32g, memory_gb: 32, weight: 4}\nnodes:\n" + "\n".join(nodes)
            + "\npools: [{name: p}]\nteams: [{name: t, pool: p}, {name: u, pool: p}]\n"
            "jobs:\n" + "\n".join(jobs) + "\n")


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from([40, 200]))
def test_no_policy_beats_the_bound_on_random_scenarios(text: str, slots: int) -> None:
    """The bound's validity: every policy's schedule is a point of the LP, whatever the slots
    (a wrong coverage or start rule for whole jobs would put the bound above a schedule)."""
    model = _model(text)
    b = lower_bound(model, slots=slots)
    for policy in ("gpuq", "fifo-typed", "kueue", "volcano", "slurm"):
        doc = to_json(Simulator(model, make_policy(policy), policy).run())
        if doc["summary"]["jobs_not_finished"]:
            continue  # a censored JCT is not a schedule the LP models (module docstring)
        got = doc["summary"]["jct_mean_s"]
        assert b.jct_mean_s <= got * (1 + 1e-6) + 1e-6, (policy, b, got)

"""No starvation: a big job behind a stream of small ones starts once it holds a reservation."""

from __future__ import annotations

from app.domain.config import load_config_text
from app.scheduling.engine import schedule
from app.scheduling.model import SchedulerConfig
from app.simulate.replay import ScenarioModel, Simulator, to_json


def scenario(reservation_after_s: float) -> ScenarioModel:
    small = "\n".join(
        f"  - {{name: s{i}, team: t, submit_at_s: {i * 20}, runtime_s: 100,"
        f" duration_estimate_s: 100, resources: {{gpus: 1}}}}"
        for i in range(100)
    )
    text = f"""
gpu_types: [{{name: a100-80g, memory_gb: 80, weight: 10}}]
nodes: [{{name: a, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}}]
pools: [{{name: p}}]
teams: [{{name: t, pool: p}}]
scheduler: {{reservation_after_s: {reservation_after_s}}}
jobs:
  - {{name: big, team: t, submit_at_s: 10, runtime_s: 100, resources: {{gpus: 8}}}}
{small}
"""
    return ScenarioModel.from_config(load_config_text(text))


def big_start(reservation_after_s: float) -> float:
    doc = to_json(Simulator(scenario(reservation_after_s), schedule).run())
    big = next(j for j in doc["jobs"] if j["name"] == "big")
    assert big["status"] == "succeeded"
    return big["start_s"]


def test_reservation_ends_starvation_of_a_big_job() -> None:
    # waits 300 s for the reservation, then at most one small job's run time
    assert big_start(300) <= 300 + 10 + 100 + 60


def test_without_reservation_the_stream_starves_it() -> None:
    # the check above can fail: with no reservation the big job waits for the stream to end
    assert big_start(1e9) >= 1900


def two_team_stream(hours: float) -> ScenarioModel:
    """One 8-card node; team a: a 1-GPU 240 s job every 30 s; team b: one 8-GPU 600 s job.

    Under the *default* config (no scheduler: section). Before the after-removal
    check in the fair-share "reclaim a type" rule, b's job waited 72,225 s and was
    preempted 120 times: each time the reservation started it, a job of a (under
    its per-type share) stopped it, b being over its share only by this one job.
    """
    n = int(hours * 3600 / 30)
    small = "\n".join(
        f"  - {{name: a{i}, team: a, submit_at_s: {i * 30}, runtime_s: 240,"
        f" duration_estimate_s: 240, resources: {{gpus: 1}}}}"
        for i in range(n)
    )
    text = f"""
gpu_types: [{{name: a100-80g, memory_gb: 80, weight: 10}}]
nodes: [{{name: n, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}}]
pools: [{{name: p}}]
teams: [{{name: a, pool: p}}, {{name: b, pool: p}}]
jobs:
  - {{name: big, team: b, submit_at_s: 15, runtime_s: 600, duration_estimate_s: 600,
      resources: {{gpus: 8}}}}
{small}
"""
    return ScenarioModel.from_config(load_config_text(text))


def test_default_config_big_job_of_another_team_starts_and_is_not_preempted() -> None:
    doc = to_json(Simulator(two_team_stream(20), schedule).run())
    big = next(j for j in doc["jobs"] if j["name"] == "big")
    assert big["status"] == "succeeded"
    assert big["preemptions"] == 0
    # the reservation's wait, then at most one small job's run time and a cycle
    limit = SchedulerConfig().reservation_after_s + 240 + 60
    assert big["wait_s"] <= limit

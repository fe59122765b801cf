"""No starvation: a big job behind a stream of small ones starts once it holds a reservation."""

from __future__ import annotations

from app.domain.config import load_config_text
from app.scheduling.engine import schedule
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

"""Scenarios and runners shared by the baseline tests (test_baseline_models.py, which
checks the models against upstream behaviour, and test_baseline_settings.py, which
checks the operator settings): one definition of each."""

from __future__ import annotations

from app.domain.config import load_config_text
from app.simulate.baseline_tuning import build
from app.simulate.replay import ScenarioModel, Simulator, to_json

# One 8-card A100 node; "borrower" takes the whole node first, then "lender" asks for its
# nominal half (Kueue: borrowing and reclaim; fair sharing).
ONE_FLAVOR = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: lender, pool: p}, {name: borrower, pool: p}]
jobs:
  - {name: borrows, team: borrower, submit_at_s: 0, runtime_s: 5000, resources: {gpus: 8}}
  - {name: nominal, team: lender, submit_at_s: 100, runtime_s: 1000, resources: {gpus: 4}}
"""


def run_policy(text: str, policy: str, **settings: object) -> dict:
    """Replay the scenario ``text`` with ``policy`` (a baseline with these operator
    settings, or its defaults) and return the result document."""
    model = ScenarioModel.from_config(load_config_text(text))
    return to_json(Simulator(model, build(policy, settings or None), policy).run())


def jobs_by_name(doc: dict) -> dict[str, dict]:
    return {j["name"]: j for j in doc["jobs"]}

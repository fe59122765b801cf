"""The short variant of the Slurm fidelity harness (bench/realslurm.py; the long runs are
``make fidelity-slurm``): real Slurm (Debian's slurmctld, slurmd, slurmdbd and munge, a
MariaDB for the accounts) replays a three-job backfill scenario at a speed-up of 30, and
our Slurm model (app/simulate/baselines/slurm.py) makes the same decisions: the wide job
waits for the node, the short one that ends before the wide one's planned start is
backfilled beside the first, the wide one then starts.

Skips loudly when Slurm is not installed (``REAL SLURM NOT RUN: ...``);
GPUQ_REQUIRE_REAL_SLURM=1 turns that into a failure. About 25 s of wall time, mostly
sleeping (MariaDB's first start is the CPU)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from app.simulate.baselines.slurm import SlurmSettings
from bench.realsched import Scenario, agreement
from bench.realslurm import MissingSlurm, find_slurm, run, slurm_model_doc

# limits are multiples of 1800 s: whole minutes at 30x; bf_interval 30 s = 1 wall second;
# PriorityCalcPeriod 30 minutes (one wall minute: Slurm's least) in both
SETTINGS = SlurmSettings(priority_calc_period_s=1800.0)
SCENARIO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: NVIDIA-A100-SXM4-80GB}
nodes:
  - {name: a100, count: 1, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: a, pool: p}, {name: b, pool: p}]
jobs:
  - {name: first, team: a, submit_at_s: 0, runtime_s: 240, duration_estimate_s: 3600,
     resources: {gpus: 4}}
  - {name: wide, team: b, submit_at_s: 30, runtime_s: 150, duration_estimate_s: 1800,
     resources: {gpus: 8}}
  - {name: short, team: a, submit_at_s: 60, runtime_s: 150, duration_estimate_s: 1800,
     resources: {gpus: 4}}
"""


def _slurm() -> None:
    try:
        find_slurm()
        if not Path("/etc/munge/munge.key").is_file():
            raise MissingSlurm("no /etc/munge/munge.key (the munge package makes it)")
    except MissingSlurm as e:
        if os.environ.get("GPUQ_REQUIRE_REAL_SLURM"):
            pytest.fail(f"GPUQ_REQUIRE_REAL_SLURM is set but {e}", pytrace=False)
        pytest.skip(f"REAL SLURM NOT RUN: {e}")


def test_real_slurm_backfills_as_the_model_does(tmp_path: Path):
    _slurm()
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    real = run(f, speedup=30.0, timeout_s=120.0, settings=SETTINGS)
    starts = {j["name"]: j["first_start_s"] for j in real["jobs"]}
    assert real["summary"]["finished"] == 3, real["jobs"]
    # backfilled: started before the wide job, which waits for the whole node
    assert starts["short"] < starts["wide"], starts
    assert starts["wide"] >= 200, starts  # after first (240 s) and short (60 + 150 s)
    ag = agreement(real, slurm_model_doc(Scenario.load(f), SETTINGS), tolerance_s=90.0)
    assert ag["order"] == 1.0 and ag["starts"] == 1.0, ag

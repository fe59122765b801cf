"""The Slurm that bench/realslurm.py runs is configured as our Slurm model says it is
(app/simulate/baselines/slurm.py): read from the generated slurm.conf, gres.conf and
sbatch arguments, no daemons. Each assertion names a setting a wrong configuration would
get wrong, so a comparison with real Slurm would compare the model with another policy."""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest

from app.simulate.baseline_tuning import settings_arg
from app.simulate.baselines.slurm import SlurmSettings
from bench.realsched import Scenario
from bench.realslurm import (
    Ports,
    _jobs,
    compressed,
    gres_conf,
    node_weights,
    poll_squeue,
    sbatch_args,
    slurm_conf,
)

SCENARIO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, speed: 2, product: NVIDIA-A100-SXM4-80GB}
  - {name: v100-32g, memory_gb: 32, weight: 4, speed: 1, product: Tesla-V100-SXM2-32GB}
nodes:
  - {name: a100, count: 2, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}
  - {name: v100, count: 1, gpu_type: v100-32g, gpus: 4, cpu: 32, memory_gb: 256}
pools: [{name: p}]
teams: [{name: a, pool: p, weight: 3}, {name: b, pool: p}]
jobs:
  - {name: any, team: a, submit_at_s: 0, runtime_s: 100, duration_estimate_s: 600,
     resources: {gpus: 2}}
  - {name: gang, team: b, submit_at_s: 0, runtime_s: 100, replicas: 3,
     resources: {gpus: 4, cpu: 3, memory_gb: 10}}
  - {name: big-mem, team: a, submit_at_s: 0, runtime_s: 100, duration_estimate_s: 1200,
     resources: {gpus: 1, min_gpu_memory_gb: 40}}
"""


@pytest.fixture
def sc(tmp_path: Path) -> Scenario:
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    return Scenario.load(f)


def conf(sc: Scenario, speedup: float = 5.0, **settings: object) -> dict[str, str]:
    ports = Ports(1, 2, 3, {n.name: 100 + i for i, n in enumerate(sc.model.cluster.nodes)})
    text = slurm_conf(sc, SlurmSettings(**settings), speedup, Path("/w"), ports)  # type: ignore[arg-type]
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, _, value = line.partition("=")
        if key in ("NodeName", "PartitionName"):
            key = f"{key}={value.split()[0]}"
        out[key] = value
    return out


def test_priority_is_the_models(sc: Scenario):
    c = conf(sc)
    assert c["PriorityType"] == "priority/multifactor"
    assert c["PriorityWeightFairshare"] == "10000"
    assert c["PriorityWeightAge"] == "1000"
    # the model's size factor is GPUs asked over the cluster's: the GRES/gpu TRES factor
    # (priority_multifactor.html), not JobSize (nodes and CPUs)
    assert c["PriorityWeightJobSize"] == "0"
    assert c["PriorityWeightTRES"] == "GRES/gpu=1000"
    # 7 days (the settings' default) and 14 days over a speed-up of 5, in minutes
    assert c["PriorityMaxAge"] == str(7 * 1440 // 5)
    assert c["PriorityDecayHalfLife"] == str(14 * 1440 // 5)
    assert c["PriorityCalcPeriod"] == "1"  # 5 minutes at 5x
    assert c["PreemptType"] == "preempt/none"
    # usage billed per card-second at the type's CU weight, CPUs and memory free
    assert 'TRESBillingWeights="GRES/gpu:a100-80g=10,GRES/gpu:v100-32g=4"' in \
        c["PartitionName=gpus"]
    assert c["AccountingStorageTRES"] == "gres/gpu,gres/gpu:a100-80g,gres/gpu:v100-32g"


def test_backfill_is_the_models(sc: Scenario):
    c = conf(sc)
    assert c["SchedulerType"] == "sched/backfill"
    sched = dict(p.split("=") for p in c["SchedulerParameters"].split(","))
    # 30 s and 60 s of scenario time at 5x; bf_window = the longest limit, at least
    # DefaultTime (2 days) = 576 wall minutes
    assert sched == {"bf_interval": "6", "bf_resolution": "12", "bf_window": "576",
                     "bf_max_job_test": "500"}
    assert conf(sc, bf_window_s=3 * 86400.0)["SchedulerParameters"].count("bf_window=864")
    assert "DefaultTime=576" in c["PartitionName=gpus"]


def test_node_weight_by_speed(sc: Scenario):
    c = conf(sc)
    # slurm.conf.5: the lowest Weight is allocated first; "speed" keeps faster cards free
    assert "Weight=2 " in c["NodeName=a100-0"] and "Weight=1 " in c["NodeName=v100-0"]
    assert "Gres=gpu:a100-80g:8 Feature=a100-80g" in c["NodeName=a100-1"]
    assert "Port=102" in c["NodeName=v100-0"]
    assert node_weights(sc, SlurmSettings(node_weight="fastest")) == {
        "a100-80g": 1, "v100-32g": 2}
    assert set(node_weights(sc, SlurmSettings(node_weight="none")).values()) == {1}


def test_gres_conf_has_a_device_file_per_card(sc: Scenario):
    lines = gres_conf(sc, Path("/w")).splitlines()
    assert lines[0] == "AutoDetect=off"
    assert "NodeName=v100-0 Name=gpu Type=v100-32g File=/w/dev/v100-0/nvidia[0-3]" in lines


def test_sbatch_arguments(sc: Scenario):
    s = SlurmSettings()
    args = {j.spec.name: sbatch_args(sc, j, 5.0, s) for j in _jobs(sc)}
    assert "--time=2" in args["any"]  # 600 s / 5 = 2 min
    assert not any(a.startswith("--constraint") for a in args["any"])  # any type
    # a gang: replicas are tasks, GPUs per task, all on one type (matching OR)
    assert {"--ntasks=3", "--gpus-per-task=4", "--cpus-per-task=3",
            "--constraint=[a100-80g|v100-32g]"} <= set(args["gang"])
    assert "--time=576" in args["gang"]  # no estimate: DefaultTime
    assert "--mem-per-cpu=3414" in args["gang"]  # 10 GiB over 3 CPUs, rounded up
    assert "--constraint=a100-80g" in args["big-mem"]  # 40 GB: the V100 cannot
    assert "--account=b" in args["gang"] and args["gang"][-1] == "--wrap=sleep 20.000"


def test_time_settings_must_compress_to_whole_units(sc: Scenario):
    assert compressed(600, 5, 60, "x") == 2
    with pytest.raises(ValueError, match="not a whole positive number"):
        compressed(600, 20, 60, "limit")  # 30 s is not whole minutes
    with pytest.raises(ValueError, match="bf_interval"):
        conf(sc, speedup=20.0)  # 30 s / 20 = 1.5 s


def test_settings_from_the_command_line(sc: Scenario):
    s = SlurmSettings(**settings_arg("slurm")("node_weight=fastest,priority_max_age_s=86400"))
    assert s == SlurmSettings(node_weight="fastest", priority_max_age_s=86400.0)
    c = conf(sc, node_weight="fastest", priority_max_age_s=86400.0)
    assert c["PriorityMaxAge"] == "288"  # one day at 5x, in minutes
    assert "Weight=1 " in c["NodeName=a100-0"]  # fastest first now
    with pytest.raises(argparse.ArgumentTypeError, match="no setting 'bf_window'"):
        settings_arg("slurm")("bf_window=3")
    with pytest.raises(argparse.ArgumentTypeError, match="node_weight"):
        settings_arg("slurm")("node_weight=heaviest")  # the model's own check


def _squeue(tmp_path: Path, script: str) -> dict[str, str]:
    """An environment whose PATH finds a stand-in ``squeue`` running ``script``."""
    import os

    exe = tmp_path / "squeue"
    exe.write_text("#!/bin/sh\n" + script + "\n")
    exe.chmod(0o755)
    return {**os.environ, "PATH": f"{tmp_path}:{os.environ.get('PATH', '')}"}


def test_a_failing_squeue_is_an_error_not_an_empty_queue(tmp_path: Path):
    # squeue's answer for two jobs, one done, one waiting (%j|%T|%S|%e|%N)
    env = _squeue(tmp_path, "echo 'a1|COMPLETED|100|160|a100-0'; echo 'b1|PENDING|N/A|N/A|'")
    assert poll_squeue(env) == {"a1": ["a1", "COMPLETED", "100", "160", "a100-0"],
                                "b1": ["b1", "PENDING", "N/A", "N/A", ""]}
    # slurmctld gone: squeue says so on stderr and exits 1; that is not "no jobs"
    env = _squeue(tmp_path, "echo 'slurm_load_jobs error: Unable to contact slurm controller"
                  " (connect failure)' >&2; exit 1")
    assert poll_squeue(env) == ("slurm_load_jobs error: Unable to contact slurm controller"
                                " (connect failure)")

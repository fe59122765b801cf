"""The short variant of the baseline-fidelity harness (bench/realsched.py; the long runs
are ``make fidelity``): real Kueue, built from its module (``make kueue-bin``), on the real
control plane with kwok GPU nodes, replays a three-job borrow-and-reclaim scenario in
compressed time, and our Kueue model (app/simulate/baselines/kueue.py) makes the same
decisions: the borrower's job is preempted when the lender asks for its nominal quota,
and the lender's job starts then. gpuq itself (its dispatcher and Kubernetes backend)
replays the same scenario on the same kind of cluster, recorded as the same document.

Real Volcano (bench/real_volcano.py) replays a scenario where its enqueue gate decides:
on a full cluster a late team's job is not enqueued (the overcommit plugin), so it
neither reclaims nor starts until a card frees, as our Volcano model says.

Skips loudly without the binaries: GPUQ_REQUIRE_REAL_KUBE=1 turns a missing control
plane into a failure, as for the other real-cluster tests, GPUQ_REQUIRE_REAL_KUEUE=1
a missing Kueue (``make kueue-bin`` is a 12-minute cold build on 2 cores) and
GPUQ_REQUIRE_REAL_VOLCANO=1 a missing Volcano (the Go module proxy refuses its module:
tools/volcano/build.sh builds it from a source checkout)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml

from app.simulate.baseline_tuning import settings_arg
from app.simulate.baselines.kueue import KueueSettings
from app.simulate.baselines.volcano import VolcanoSettings
from bench.real_volcano import (
    MIN_MEMBER_KEY,
    QUEUE_KEY,
    MissingVolcano,
    find_volcano,
    job_settings,
    pod_settings,
    queue_weights,
    scheduler_conf,
)
from bench.realsched import (
    MissingKueue,
    Scenario,
    agreement,
    find_kueue,
    kueue_config,
    kueue_objects,
    model_doc,
    run,
)
from tests.realkube.control_plane import MissingBinaries, find_binaries

SCENARIO = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: NVIDIA-A100-SXM4-80GB}
  - {name: v100-32g, memory_gb: 32, weight: 4, product: Tesla-V100-SXM2-32GB}
nodes:
  - {name: a100, count: 1, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}
  - {name: v100, count: 1, gpu_type: v100-32g, gpus: 4, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: lender, pool: p}, {name: borrower, pool: p}]
jobs:
  # run times as short as keep every decision: borrows still runs when nominal asks for
  # the lender's quota at 200 s, and Kueue reruns it whole after nominal (scenario end
  # 750 s, 30 s of wall time at 25x; with 800 and 300 s it was 1,300 s)
  - {name: borrows, team: borrower, submit_at_s: 0, runtime_s: 400,
     resources: {gpus: 8, gpu_types: [a100-80g]}}
  - {name: nominal, team: lender, submit_at_s: 200, runtime_s: 150,
     resources: {gpus: 4, gpu_types: [a100-80g]}}
  - {name: anywhere, team: lender, submit_at_s: 250, runtime_s: 300, resources: {gpus: 2}}
"""


def test_kueue_configuration_follows_the_model(tmp_path: Path):
    """Without binaries: the objects installed are the model's configuration (quotas
    split between the teams, flavors cheapest first, one cohort, fair sharing weights)."""
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    objs = kueue_objects(Scenario.load(f))
    flavors = [o["metadata"]["name"] for p, o in objs if p == "resourceflavors"]
    assert flavors == ["v100-32g", "a100-80g"]  # cheapest first, as the model tries them
    cqs = {o["metadata"]["name"]: o["spec"] for p, o in objs if p == "clusterqueues"}
    assert set(cqs) == {"lender", "borrower"}
    for spec in cqs.values():
        assert spec["cohortName"] == "gpuq-teams"
        assert spec["preemption"] == {"reclaimWithinCohort": "Any",
                                      "withinClusterQueue": "LowerPriority"}
        quota = {fl["name"]: fl["resources"][0]["nominalQuota"]
                 for fl in spec["resourceGroups"][0]["flavors"]}
        assert quota == {"v100-32g": "2000m", "a100-80g": "4000m"}  # half of 4 and of 8


def test_kueue_configuration_of_the_tuned_setting(tmp_path: Path):
    """The setting the tuning chose (fastest flavor first, the cohort holds the quota,
    CPU and memory covered) is installed as the model has it: flavors fastest first, the
    capacity per flavor as the Cohort's quota for all three resources in the nodes' and
    Pods' units, nothing nominal in the ClusterQueues, and nothing excluded in Kueue's
    Configuration (uncovered, cpu and memory are excluded)."""
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    kv = settings_arg("kueue")("flavor_order=fastest,nominal=cohort,cover_cpu_memory=true")
    assert kv == {"flavor_order": "fastest", "nominal": "cohort", "cover_cpu_memory": True}
    settings = KueueSettings(**kv)
    objs = kueue_objects(Scenario.load(f), settings)
    flavors = [o["metadata"]["name"] for p, o in objs if p == "resourceflavors"]
    assert flavors == ["a100-80g", "v100-32g"]
    (cohort,) = [o["spec"] for p, o in objs if p == "cohorts"]
    (group,) = cohort["resourceGroups"]
    assert group["coveredResources"] == ["nvidia.com/gpu", "cpu", "memory"]
    a100 = {r["name"]: r["nominalQuota"] for r in group["flavors"][0]["resources"]}
    assert a100 == {"nvidia.com/gpu": "8000m", "cpu": "64000m", "memory": f"{512 * 1024}Mi"}
    for spec in (o["spec"] for p, o in objs if p == "clusterqueues"):
        assert {r["nominalQuota"] for fl in spec["resourceGroups"][0]["flavors"]
                for r in fl["resources"]} == {"0m", "0Mi"}
    assert "excludeResourcePrefixes" not in kueue_config(tmp_path, settings)
    assert "excludeResourcePrefixes" in kueue_config(tmp_path, KueueSettings())


@pytest.mark.parametrize("text", ["flavor_order", "colour=blue", "flavor_order=dearest",
                                  "cover_cpu_memory=maybe"])
def test_kueue_settings_text_says_what_is_wrong(text: str):
    import argparse
    with pytest.raises(argparse.ArgumentTypeError, match="kueue settings"):
        settings_arg("kueue")(text)


def _binaries(kueue: bool = True, volcano: bool = False) -> None:
    needed = [(find_binaries, MissingBinaries, "GPUQ_REQUIRE_REAL_KUBE", "KUEUE")]
    if kueue:
        needed.append((find_kueue, MissingKueue, "GPUQ_REQUIRE_REAL_KUEUE", "KUEUE"))
    if volcano:
        needed[0] = needed[0][:3] + ("VOLCANO",)
        needed.append((find_volcano, MissingVolcano, "GPUQ_REQUIRE_REAL_VOLCANO", "VOLCANO"))
    for find, missing, strict, system in needed:
        try:
            find()
        except missing as e:
            if os.environ.get(strict):
                pytest.fail(f"{strict} is set but {e}", pytrace=False)
            pytest.skip(f"REAL {system} NOT RUN: {e}")


def test_real_kueue_reclaims_as_the_model_does(tmp_path: Path):
    _binaries()
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    real = run(f, "kueue", speedup=25.0, timeout_s=240)
    jobs = {j["name"]: j for j in real["jobs"]}
    assert all(j["status"] == "succeeded" for j in jobs.values()), jobs
    # the result is the document gpuq simulate writes
    modelled = model_doc(Scenario.load(f).model, "kueue")
    assert set(real) >= set(modelled) and set(real["summary"]) == set(modelled["summary"])
    assert set(real["jobs"][0]) == set(modelled["jobs"][0])
    # real Kueue reclaimed the lender's nominal quota from the borrower, as the model says
    assert jobs["borrows"]["preemptions"] >= 1
    assert jobs["nominal"]["first_start_s"] < jobs["borrows"]["end_s"]
    assert jobs["anywhere"]["gpu_types"] == ["v100-32g"]  # the first flavor
    ag = agreement(real, modelled, tolerance_s=100.0)
    assert ag["victims"] == 1.0 and ag["types"] == 1.0, ag


def test_real_gpuq_records_the_same_document_as_its_simulation(tmp_path: Path):
    """gpuq itself in the harness: its dispatcher and Kubernetes backend on the same
    control plane and kwok nodes replay the scenario, and the recording is the document
    ``gpuq simulate`` writes; every job ran, each on a type its request allows, and the
    decisions are the simulated gpuq's (same victims, same GPU types)."""
    _binaries(kueue=False)
    f = tmp_path / "s.yaml"
    f.write_text(SCENARIO)
    real = run(f, "gpuq", speedup=25.0, timeout_s=240)
    jobs = {j["name"]: j for j in real["jobs"]}
    assert all(j["status"] == "succeeded" for j in jobs.values()), jobs
    modelled = model_doc(Scenario.load(f).model, "gpuq")
    assert set(real["summary"]) == set(modelled["summary"])
    assert set(real["jobs"][0]) == set(modelled["jobs"][0])
    assert jobs["borrows"]["gpu_types"] == jobs["nominal"]["gpu_types"] == ["a100-80g"]
    assert all(j["first_start_s"] is not None for j in jobs.values())
    ag = agreement(real, modelled, tolerance_s=100.0)
    assert ag["victims"] == 1.0 and ag["types"] == 1.0, ag


def test_volcano_configuration_follows_the_model():
    """Without binaries: the scheduler conf is the chart's with the model's actions and
    overcommit plugin, Pods ask Volcano with a preferred affinity by speed, and each Job
    carries its queue, its gang size and a failure policy that reruns an evicted Pod."""
    conf = yaml.safe_load(scheduler_conf(VolcanoSettings()))
    assert conf["actions"] == "enqueue, allocate, backfill, reclaim"
    names = [p["name"] for tier in conf["tiers"] for p in tier["plugins"]]
    assert names == ["priority", "gang", "conformance", "overcommit", "drf", "predicates",
                     "proportion", "nodeorder", "binpack"]
    off = yaml.safe_load(scheduler_conf(VolcanoSettings(overcommit_factor=None, reclaim=False)))
    assert off["actions"] == "enqueue, allocate, backfill"
    assert "overcommit" not in [p["name"] for t in off["tiers"] for p in t["plugins"]]
    two = yaml.safe_load(scheduler_conf(VolcanoSettings(overcommit_factor=2.0)))
    assert {"name": "overcommit", "arguments": {"overcommit-factor": 2.0}} in two["tiers"][1][
        "plugins"]
    pod: dict = {}
    pod_settings(pod, [("A100", 1.0), ("V100", 0.5)], VolcanoSettings())
    assert pod["schedulerName"] == "volcano"
    prefs = pod["affinity"]["nodeAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert [(p["weight"], p["preference"]["matchExpressions"][0]["values"]) for p in prefs] == [
        (100, ["A100"]), (50, ["V100"])]
    job: dict = {"metadata": {}, "spec": {"template": {"metadata": {}}}}
    job_settings(job, "nlp", 3)
    assert job["metadata"]["annotations"] == {QUEUE_KEY: "nlp", MIN_MEMBER_KEY: "3"}
    assert job["spec"]["template"]["metadata"]["annotations"] == {QUEUE_KEY: "nlp"}
    assert job["spec"]["podFailurePolicy"]["rules"][0]["onPodConditions"] == [
        {"type": "DisruptionTarget"}]
    assert queue_weights({"a": 0.5, "b": 1.0}) == {"a": 10, "b": 20}


OVERCOMMIT = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: NVIDIA-A100-SXM4-80GB}
nodes:
  - {name: a100, count: 1, gpu_type: a100-80g, gpus: 4, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: early, pool: p}, {name: late, pool: p}]
jobs:
""" + "".join(f"  - {{name: e{i}, team: early, submit_at_s: {10 * i}, runtime_s: 600, "
              f"resources: {{gpus: 1}}}}\n" for i in range(4)) + (
    "  - {name: late, team: late, submit_at_s: 100, runtime_s: 200, resources: {gpus: 1}}\n")


def test_real_volcano_does_not_enqueue_past_the_overcommit_factor(tmp_path: Path):
    """The 4-card node is full when "late" arrives: 1.2 x 4 - 4 = 0.8 cards are left to
    enqueue, too few for its one card, so real Volcano neither reclaims for it (its team
    deserves 2 cards) nor starts it before an early job ends; the model says the same, and
    without the overcommit plugin it would have reclaimed at once."""
    f = tmp_path / "s.yaml"
    f.write_text(OVERCOMMIT)
    modelled = model_doc(Scenario.load(f).model, "volcano")
    mj = {j["name"]: j for j in modelled["jobs"]}
    assert mj["late"]["first_start_s"] >= 600.0 and not any(j["preemptions"] for j in mj.values())
    ungated = model_doc(Scenario.load(f).model, "volcano", {"overcommit_factor": None})
    assert {j["name"]: j for j in ungated["jobs"]}["late"]["first_start_s"] == 100.0
    _binaries(kueue=False, volcano=True)
    real = run(f, "volcano", speedup=25.0, timeout_s=240)
    jobs = {j["name"]: j for j in real["jobs"]}
    assert all(j["status"] == "succeeded" for j in jobs.values()), jobs
    assert set(real["summary"]) == set(modelled["summary"])
    assert jobs["late"]["first_start_s"] >= 600.0, jobs["late"]
    assert not any(j["preemptions"] for j in jobs.values()), jobs
    ag = agreement(real, modelled, tolerance_s=100.0)
    assert ag["victims"] == 1.0 and ag["types"] == 1.0, ag

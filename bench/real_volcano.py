"""Real Volcano on the real control plane, configured as the ``volcano`` model says.

The model (app/simulate/baselines/volcano.py) describes the chart's scheduler
configuration (``installer/helm/chart/volcano/config/volcano-scheduler.conf`` of
volcano-sh/volcano) with the ``reclaim`` action when its setting says so, one Queue per
team with the team's weight, and Pods that request ``nvidia.com/gpu`` with a required
node affinity on the allowed products (``resource_model: affinity``) and, with
``prefer_speed``, a preferred one that ranks the products by the operator's speed
table. :func:`running_volcano` installs exactly that: Volcano's CRDs, its controller
manager (its PodGroup controller makes one PodGroup per ``batch/v1`` Job from the Job's
``scheduling.volcano.sh/group-min-member`` annotation, ``pkg/controllers/podgroup``; its
Queue controller opens the Queues) and its scheduler.

The Go module proxy refuses ``volcano.sh/volcano`` (every version, docs/evaluation.md),
so the binaries are built from a source snapshot of the repository with the
dependencies from the module proxy (tools/volcano/build.sh); without them the real
Volcano cannot run here, and what needs it says so.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client

from app.simulate.baselines.volcano import VolcanoSettings
from tests.realkube.control_plane import REPO, dies_with_parent, free_port
from tests.realkube.fixtures import Session, install_crds, wait_for

API = ("scheduling.volcano.sh", "v1beta1")
QUEUE_KEY = "scheduling.volcano.sh/queue-name"  # staging/.../scheduling/v1beta1/labels.go
MIN_MEMBER_KEY = "scheduling.volcano.sh/group-min-member"
SCHEDULER_NAME = "volcano"
BINARIES = ("vc-scheduler", "vc-controller-manager")


class MissingVolcano(RuntimeError):
    """The Volcano binaries or CRDs are not there (the message says how to get them)."""


def volcano_dir() -> Path:
    """GPUQ_VOLCANO_BIN, else the repository's .volcano-bin (tools/volcano/build.sh)."""
    return Path(os.environ.get("GPUQ_VOLCANO_BIN") or REPO / ".volcano-bin")


def find_volcano() -> Path:
    d = volcano_dir()
    if not all((d / b).is_file() for b in BINARIES) or not list(
            (d / "volcano-crds").glob("*.yaml")):
        raise MissingVolcano(
            f"Volcano missing from {d}: the Go module proxy refuses volcano.sh/volcano, so it "
            "is built from a source snapshot of github.com/volcano-sh/volcano "
            "(tools/volcano/build.sh SRC_DIR), which needs the repository's source")
    return d


def scheduler_conf(settings: VolcanoSettings) -> str:
    """The chart's volcano-scheduler.conf, with ``reclaim`` after ``backfill`` when the
    model's setting enables it (the model's action list), and the ``overcommit`` plugin
    with the setting's factor (its default, 1.2, left implicit) or, without one, taken out
    (docs/user-guide/how_to_configure_scheduler.md lists both as the operator's choice)."""
    actions = "enqueue, allocate, backfill" + (", reclaim" if settings.reclaim else "")
    factor = settings.overcommit_factor
    overcommit: list[dict[str, Any]] = [] if factor is None else [
        {"name": "overcommit"} if factor == 1.2 else
        {"name": "overcommit", "arguments": {"overcommit-factor": factor}}]
    return yaml.safe_dump({"actions": actions, "tiers": [
        {"plugins": [{"name": "priority"}, {"name": "gang", "enablePreemptable": False},
                     {"name": "conformance"}]},
        {"plugins": [*overcommit, {"name": "drf", "enablePreemptable": False},
                     {"name": "predicates"}, {"name": "proportion"}, {"name": "nodeorder"},
                     {"name": "binpack"}]},
    ]}, sort_keys=False)


def pod_settings(pod: dict[str, Any], products_by_speed: list[tuple[str, float]],
                 settings: VolcanoSettings) -> None:
    """A Pod template as Volcano's user writes it: scheduled by Volcano and, with
    ``prefer_speed``, a preferred node affinity weighting each allowed product by its rank
    in speed (k tiers of equal speed: the fastest 100, the next 100 (k-1)/k, ...;
    ``nodeorder``'s ``nodeaffinity`` scores it): the model prefers by the order alone, so
    types a hair apart in speed are as far apart in weight as any two."""
    pod["schedulerName"] = SCHEDULER_NAME
    if settings.prefer_speed and len(products_by_speed) > 1:
        tiers = sorted({s for _p, s in products_by_speed}, reverse=True)
        k = len(tiers)
        pod.setdefault("affinity", {}).setdefault("nodeAffinity", {})[
            "preferredDuringSchedulingIgnoredDuringExecution"] = [
            {"weight": max(1, round(100 * (k - tiers.index(s)) / k)),
             "preference": {"matchExpressions": [
                 {"key": "nvidia.com/gpu.product", "operator": "In", "values": [p]}]}}
            for p, s in products_by_speed]


def job_settings(job: dict[str, Any], queue: str, replicas: int) -> None:
    """A ``batch/v1`` Job for Volcano: its queue and gang size as annotations (the PodGroup
    controller reads them), and a Pod failure policy that ignores Pods Volcano evicts (the
    evictor marks them ``DisruptionTarget``, pkg/scheduler/cache/cache.go), so a reclaimed
    Job runs again rather than failing: what an operator sets for Jobs under a scheduler
    that preempts."""
    meta = job["metadata"]
    meta.setdefault("annotations", {}).update(
        {QUEUE_KEY: queue, MIN_MEMBER_KEY: str(replicas)})
    tmeta = job["spec"]["template"]["metadata"]
    tmeta.setdefault("annotations", {})[QUEUE_KEY] = queue
    job["spec"]["podFailurePolicy"] = {"rules": [
        {"action": "Ignore", "onPodConditions": [{"type": "DisruptionTarget"}]}]}


def queue_weights(weights: dict[str, float]) -> dict[str, int]:
    """A Queue's weight is an integer >= 1: the team weights scaled so the smallest is 10
    (proportion divides by their sum, so only the ratios matter)."""
    low = min(weights.values(), default=1.0) or 1.0
    return {t: max(1, round(10 * w / low)) for t, w in weights.items()}


@contextlib.contextmanager
def running_volcano(s: Session, weights: dict[str, float],
                    settings: VolcanoSettings | None = None) -> Iterator[None]:
    """Volcano's CRDs, its controller manager and its scheduler running, one open Queue
    per team (``weights``); stopped after."""
    settings = settings or VolcanoSettings()
    if settings.resource_model != "affinity":
        raise ValueError("only the affinity resource model is set up on the real Volcano")
    d = find_volcano()
    install_crds(s.admin, d / "volcano-crds", "Volcano")
    w = s.cp.workdir
    (w / "volcano-scheduler.conf").write_text(scheduler_conf(settings))
    env = {**os.environ, "KUBECONFIG": str(s.cp.kubeconfig)}
    procs: dict[str, subprocess.Popen] = {}

    def start(name: str, args: list[str]) -> None:
        log = open(w / f"{name}.log", "wb")  # noqa: SIM115 (lives with the process)
        procs[name] = (subprocess.Popen(
            dies_with_parent([str(d / name), f"--kubeconfig={s.cp.kubeconfig}",
                              "--leader-elect=false", *args]),
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
            start_new_session=True))

    co = client.CustomObjectsApi(s.admin)

    def exited() -> None:
        for name, p in procs.items():
            if p.poll() is not None:
                raise RuntimeError(f"{name} exited {p.returncode}:\n"
                                   + (w / f"{name}.log").read_text(errors="replace")[-3000:])
    try:
        start("vc-controller-manager", [f"--healthz-address=127.0.0.1:{free_port()}",
                                        f"--listen-address=127.0.0.1:{free_port()}"])
        # the scheduler creates the root and default Queues the Queue controller needs
        # before it opens a team's (pkg/scheduler/cache/cache.go, newDefaultAndRootQueue)
        start("vc-scheduler", [f"--scheduler-conf={w / 'volcano-scheduler.conf'}",
                               "--schedule-period=1s",
                               f"--healthz-address=127.0.0.1:{free_port()}",
                               f"--listen-address=127.0.0.1:{free_port()}"])
        for team, wt in sorted(queue_weights(weights).items()):
            co.create_cluster_custom_object(*API, "queues", {
                "apiVersion": "/".join(API), "kind": "Queue", "metadata": {"name": team},
                "spec": {"weight": wt, "reclaimable": True}})

        def open_queues() -> bool:
            exited()
            qs = {q["metadata"]["name"]: (q.get("status") or {}).get("state")
                  for q in co.list_cluster_custom_object(*API, "queues")["items"]}
            return all(qs.get(t) == "Open" for t in weights)
        wait_for(open_queues, 120, "Volcano's Queues open")
        yield
        exited()  # neither may have died during the replay
    finally:
        for p in procs.values():
            p.terminate()
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()

"""Real schedulers on a real control plane, replaying a scenario, beside our model of each.

The baseline models of ``gpuq simulate`` (app/simulate/baselines) are checked against the
systems they model. One run of this command:

1. starts the real control plane of tests/realkube (etcd, kube-apiserver,
   kube-controller-manager with its Job controller, kube-scheduler, kwok) and creates the
   scenario's nodes as kwok Nodes labelled as GPU Feature Discovery labels them
   (``nvidia.com/gpu.product``, ``.memory``, ``.count``; ``nvidia.com/gpu`` capacity);
2. installs one real system configured as the model says it is configured:

   - ``kueue``: the Kueue controller manager built from the module at the version pinned
     in tools/kueue/go.mod (``make kueue-bin``), its CRDs from the same module, one
     ResourceFlavor per GPU type (``nodeLabels`` on the product), one ClusterQueue per
     team in one cohort with the model's nominal quotas (the model's own
     ``KueuePolicy.setup`` computes them), flavors cheapest first,
     ``flavorFungibility`` ``MayStopSearch``/``TryNextFlavor``, ``reclaimWithinCohort:
     Any``, ``withinClusterQueue: LowerPriority``, ``BestEffortFIFO``, fair sharing on
     (``fairSharing.preemptionStrategies`` as in Kueue's
     config/components/manager/controller_manager_config.yaml) with each team's weight;
     a LocalQueue per team. The Kueue webhooks are not registered with the API server,
     so each Job is created suspended with ``kueue.x-k8s.io/queue-name`` (what Kueue's
     Job webhook defaults);
   - ``kube-scheduler``: its default profile, no queue (the Jobs are created running);
   - ``gpuq``: gpuq itself, its dispatcher (app/dispatch) with the Kubernetes backend
     (app/cluster/kubernetes.py) talking to the same API server with its own
     ServiceAccount (k8s/rbac.yaml), its store a fresh PostgreSQL database configured
     with the scenario's GPU types, pools and teams (``TEST_DATABASE_URL``'s server); each
     job is submitted to the store at its submit time (the API's path, ``submit_jobs``)
     and gpuq creates and binds its Pods. The dispatcher reads a compressed clock
     (scenario time: wall time times the speed-up) so its time-based rules (estimates,
     aging, the thrash window, the descheduler's interval) run in scenario time as in
     ``gpuq simulate``; it passes at the production interval (``GPUQ_DISPATCH_INTERVAL``,
     1 s of wall time);

3. replays the scenario's jobs in compressed time: each job is a ``batch/v1`` Job
   (parallelism = completions = replicas, ``nvidia.com/gpu`` per Pod, node affinity on
   the products its request allows) created at ``submit_at_s / speedup``; kwok ends each
   Pod ``runtime_s / speedup`` after it started (tests/realkube/kwok-stages.yaml,
   ``outcome.gpuq.test/run-for``);
4. records each job's submit, admission, start (every Pod ready), end and preemptions
   (a Job suspended again after admission) in scenario seconds, written as the result
   JSON ``gpuq simulate`` writes (``--out``; the admissions and preemptions are its
   ``events``, each job's GPU types an extra ``gpu_types``), and, with ``--compare``, runs
   our model of the same system on the same scenario and prints how they agree
   (:func:`agreement`).

    nice -n 10 .venv/bin/python -m bench.realsched eval/fidelity/borrow-reclaim.yaml \\
        --system kueue --speedup 20 --compare

Needs the control plane binaries (``make kube-bin``) and, for Kueue, ``make kueue-bin``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client
from sqlalchemy import select

from app.clock import utcnow
from app.dispatch.descheduler_step import Descheduler
from app.dispatch.dispatcher import Dispatcher
from app.domain.config import load_config
from app.domain.spec import JobSpec
from app.scheduling.filters import allowed_types
from app.scheduling.model import Snapshot
from app.simulate.all_policies import make_policy
from app.simulate.baseline_tuning import build, settings_arg
from app.simulate.baselines.kueue import KueuePolicy, KueueSettings
from app.simulate.baselines.volcano import VolcanoSettings
from app.simulate.replay import ScenarioModel, SimJob, SimulationResult, Simulator, to_json
from app.store.db import make_engine, make_session_factory
from app.store.jobs import submit_jobs
from app.store.node_rows import gpu_type_configs
from app.store.orm import JobRow
from bench.real_volcano import job_settings, pod_settings, running_volcano
from tests.fakekube.db import fresh_database
from tests.fakekube.fixtures import elector, make_cluster
from tests.realkube.control_plane import (
    KWOK_NODE_LABEL,
    REPO,
    dies_with_parent,
    free_port,
    running_control_plane,
)
from tests.realkube.fixtures import RealKube, Session, install_crds, wait_for

SYSTEMS = ("kueue", "volcano", "kube-scheduler", "gpuq")
#: the model of each system in app/simulate/all_policies.py: kube-scheduler's default
#: profile is what ``fifo-typed`` stands for (one queue in submit order, no head-of-line
#: blocking, only the allowed types; it places a job's replicas all or nothing, which
#: kube-scheduler does not, and takes nodes by name where kube-scheduler scores them)
MODEL_OF = {"kueue": "kueue", "volcano": "volcano", "gpuq": "gpuq",
            "kube-scheduler": "fifo-typed"}
JOB_LABEL = "gpuq.bench/job"
KUEUE_API = ("kueue.x-k8s.io", "v1beta2")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"
COHORT = "gpuq-teams"
POLL_S = 0.2
KINDS = {"resourceflavors": "ResourceFlavor", "cohorts": "Cohort",
         "clusterqueues": "ClusterQueue", "localqueues": "LocalQueue"}


class MissingKueue(RuntimeError):
    """The Kueue binary or its CRDs are not there (the message says how to get them)."""


def kueue_dir() -> Path:
    """GPUQ_KUEUE_BIN, else the repository's .kueue-bin (``make kueue-bin``)."""
    return Path(os.environ.get("GPUQ_KUEUE_BIN") or REPO / ".kueue-bin")


def find_kueue() -> Path:
    d = kueue_dir()
    if not (d / "kueue").is_file() or not list((d / "kueue-crds").glob("*.yaml")):
        raise MissingKueue(f"Kueue missing from {d} (build it with `make kueue-bin`: "
                           "tools/kueue/build.sh, needs Go and the Go module proxy)")
    return d


# ------------------------------------------------------------------ the cluster
@dataclass
class Scenario:
    """A scenario file: the model the simulator replays and each GPU type's literal
    ``nvidia.com/gpu.product`` (a config's ``product`` is a pattern; the fidelity
    scenarios give a literal one; none: the type's name)."""

    model: ScenarioModel
    products: dict[str, str]
    #: the scenario's configuration without its nodes and jobs (gpuq's store gets it;
    #: on Kubernetes the nodes come from the cluster, the jobs are submitted)
    config_text: str = ""

    @classmethod
    def load(cls, path: Path) -> Scenario:
        cfg = load_config(path)
        doc = yaml.safe_load(path.read_text())
        conf = {k: v for k, v in doc.items() if k not in ("nodes", "jobs")}
        return cls(ScenarioModel.from_config(cfg),
                   {t.name: t.product or t.name for t in cfg.gpu_types},
                   yaml.safe_dump(conf))


def kwok_nodes(sc: Scenario) -> list[dict]:
    """The scenario's nodes as kwok Nodes with GPU Feature Discovery's labels."""
    model = sc.model
    out = []
    for n in model.cluster.nodes:
        cards = len(n.devices)
        cap = {"cpu": str(int(n.cpu)), "memory": f"{int(n.memory_gb)}Gi", "pods": "110"}
        labels = {KWOK_NODE_LABEL: "true"}
        if n.gpu_type and cards:
            t = model.cluster.gpu_types[n.gpu_type]
            cap["nvidia.com/gpu"] = str(cards)
            labels.update({"nvidia.com/gpu.product": sc.products[n.gpu_type],
                           "nvidia.com/gpu.memory": str(int(t.memory_gb * 1024)),
                           "nvidia.com/gpu.count": str(cards)})
        out.append({"metadata": {"name": n.name, "labels": labels},
                    "status": {"capacity": cap, "allocatable": cap}})
    return out


def team_ns(team: str) -> str:
    return f"team-{team}"


def k8s_job(sc: Scenario, j: SimJob, system: str, speedup: float,
            volcano: VolcanoSettings | None = None) -> dict:
    """One scenario job as the ``batch/v1`` Job its team would create (for Volcano, with
    ``volcano``'s Pod settings: bench/real_volcano.py)."""
    model = sc.model
    spec = j.spec
    replicas = spec.replicas or 1
    cards = spec.resources.gpus or 0
    # the CPU and memory the model places by (kube-scheduler's LeastAllocated scores them)
    host = {"cpu": f"{j.request.cpu:g}", "memory": f"{round(j.request.memory_gb * 1024)}Mi"}
    allowed = [t.name for t in allowed_types(j.request, model.cluster.gpu_types,
                                             model.cluster.pools)]
    present = {n.gpu_type for n in model.cluster.nodes if n.gpu_type}
    pod: dict[str, Any] = {
        "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
        "containers": [{"name": "main", "image": "registry.example/train:1",
                        "resources": {"requests": host,
                                      "limits": {"nvidia.com/gpu": str(cards), **host}}}],
    }
    if present - set(allowed):
        pod["affinity"] = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [{"matchExpressions": [{
                "key": "nvidia.com/gpu.product", "operator": "In",
                "values": sorted({sc.products[t] for t in allowed if t in present})}]}]}}}
    labels = {"gpuq.bench/job": j.spec.name}
    if system == "kueue":
        labels[QUEUE_LABEL] = j.request.team
    if system == "volcano":
        speed = {t: model.cluster.gpu_types[t].speed for t in allowed if t in present}
        pod_settings(pod, sorted(((sc.products[t], v) for t, v in speed.items()),
                                 key=lambda pv: (-pv[1], pv[0])), volcano or VolcanoSettings())
    job = {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": j.spec.name, "namespace": team_ns(j.request.team),
                         "labels": labels},
            "spec": {"parallelism": replicas, "completions": replicas, "backoffLimit": 0,
                     "suspend": system == "kueue",
                     "template": {"metadata": {"labels": labels, "annotations": {
                         "outcome.gpuq.test/end": "Succeeded",
                         "outcome.gpuq.test/run-for": f"{j.runtime_s / speedup:.3f}s"}},
                         "spec": pod}}}
    if system == "volcano":
        job_settings(job, j.request.team, replicas)
    return job


# ------------------------------------------------------------------ Kueue
def kueue_objects(sc: Scenario, settings: KueueSettings | None = None
                  ) -> list[tuple[str, dict]]:
    """(plural, object) of the Kueue configuration the model describes
    (app/simulate/baselines/kueue.py, ``settings``: its defaults): the model's own setup
    computes the flavor order and the quotas, so the two cannot be configured apart."""
    model = sc.model
    k = KueuePolicy(settings)
    # the model's resource keys (gpu, cpu, memory) as the Pods of k8s_job request them
    names = {"gpu": "nvidia.com/gpu", "cpu": "cpu", "memory": "memory"}
    covered = [names[r] for r in k.resources]
    sim = Simulator(model, make_policy("fifo-typed"), "fifo-typed")
    c = model.cluster
    k.setup(Snapshot(now=0.0, gpu_types=c.gpu_types, nodes=c.nodes, pools=c.pools,
                     teams=c.teams, priorities=c.priorities, running=[],
                     pending=[j.request for j in sim.jobs], config=c.scheduler))

    def quota(of: dict[tuple[str, str], float], f: str) -> list[dict]:
        """One flavor's quotas, in the units of the nodes and Pods (memory: GiB)."""
        out = []
        for r in k.resources:
            v = of.get((f, r), 0.0)
            q = f"{round(v * 1024)}Mi" if r == "memory" else f"{round(v * 1000)}m"
            out.append({"name": names[r], "nominalQuota": q})
        return out

    out: list[tuple[str, dict]] = []
    for f in k.flavors:
        out.append(("resourceflavors", {"metadata": {"name": f}, "spec": {
            "nodeLabels": {"nvidia.com/gpu.product": sc.products[f]}}}))
    if k.settings.nominal == "cohort":  # the capacity is the cohort's own quota
        out.append(("cohorts", {"metadata": {"name": COHORT}, "spec": {"resourceGroups": [
            {"coveredResources": covered, "flavors": [
                {"name": f, "resources": quota(k.capacity, f)} for f in k.flavors]}]}}))
    for team in sorted(k.nominal):
        out.append(("clusterqueues", {"metadata": {"name": team}, "spec": {
            "cohortName": COHORT,
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name":
                                                  team_ns(team)}},
            "queueingStrategy": "BestEffortFIFO",
            "flavorFungibility": {"whenCanBorrow": k.settings.when_can_borrow,
                                  "whenCanPreempt": "TryNextFlavor"},
            "preemption": {"reclaimWithinCohort": "Any",
                           "withinClusterQueue": "LowerPriority"},
            "fairSharing": {"weight": str(k.weight.get(team, 1.0))},
            "resourceGroups": [{"coveredResources": covered, "flavors": [
                {"name": f, "resources": quota(k.nominal[team], f)}
                for f in k.flavors]}]}}))
        out.append(("localqueues", {"metadata": {"name": team, "namespace": team_ns(team)},
                                    "spec": {"clusterQueue": team}}))
    return out


def kueue_config(workdir: Path, settings: KueueSettings | None = None) -> str:
    """Kueue's Configuration: config/components/manager/controller_manager_config.yaml of
    the module with fair sharing on, only the batch/job integration, no leader election
    and no webhook registration (so certificates are ours, in the work directory)."""
    settings = settings or KueueSettings()
    # CPU and memory uncovered (the model's cover_cpu_memory: false): Kueue ignores them,
    # kube-scheduler still places by them; covered, the ClusterQueues hold their quota
    excluded = {} if settings.cover_cpu_memory else {
        "resources": {"excludeResourcePrefixes": ["cpu", "memory"]}}
    return yaml.safe_dump({
        "apiVersion": "config.kueue.x-k8s.io/v1beta2", "kind": "Configuration",
        "namespace": "kueue-system",
        "health": {"healthProbeBindAddress": f"127.0.0.1:{free_port()}"},
        "metrics": {"bindAddress": "0"},
        "webhook": {"port": free_port(), "host": "127.0.0.1",
                    "certDir": str(workdir / "kueue-certs")},
        "leaderElection": {"leaderElect": False},
        "internalCertManagement": {"enable": False},
        "clientConnection": {"qps": 50, "burst": 100},
        "integrations": {"frameworks": ["batch/job"]},
        **excluded,
        "fairSharing": {"preemptionStrategies": list(settings.strategies)},
        "featureGates": {"VisibilityOnDemand": False},
    })


def self_signed(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    if not (d / "tls.crt").exists():
        subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes",
                        "-keyout", str(d / "tls.key"), "-out", str(d / "tls.crt"),
                        "-days", "1", "-subj", "/CN=localhost"], check=True,
                       capture_output=True)


@contextlib.contextmanager
def running_kueue(s: Session, sc: Scenario, settings: KueueSettings | None = None
                  ) -> Iterator[subprocess.Popen]:
    """Kueue's CRDs and configuration installed (the model's ``settings``), its manager
    running (stopped after)."""
    d = find_kueue()
    install_crds(s.admin, d / "kueue-crds", "Kueue")
    s.core.create_namespace({"metadata": {"name": "kueue-system"}})
    w = s.cp.workdir
    self_signed(w / "kueue-certs")
    # with internal certificate management off, Kueue reads its metrics certificate from
    # this fixed path (cmd/kueue/main.go); the metrics server itself is off (bindAddress 0)
    self_signed(Path("/etc/kueue/metrics/certs"))
    (w / "kueue.yaml").write_text(kueue_config(w, settings))
    log = open(w / "kueue.log", "wb")  # noqa: SIM115 (lives with the process)
    proc = subprocess.Popen(dies_with_parent([str(d / "kueue"), f"--config={w / 'kueue.yaml'}",
                                              "--zap-log-level=2"]),
                            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                            env={**os.environ, "KUBECONFIG": str(s.cp.kubeconfig)},
                            start_new_session=True)
    try:
        co = client.CustomObjectsApi(s.admin)
        for plural, obj in kueue_objects(sc, settings):
            ns = obj["metadata"].get("namespace")
            body = {"apiVersion": "/".join(KUEUE_API),
                    "kind": KINDS[plural], **obj}
            if ns:
                co.create_namespaced_custom_object(*KUEUE_API, ns, plural, body)
            else:
                co.create_cluster_custom_object(*KUEUE_API, plural, body)

        def active() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"kueue exited {proc.returncode}:\n"
                                   + (w / "kueue.log").read_text(errors="replace")[-3000:])
            cqs = co.list_cluster_custom_object(*KUEUE_API, "clusterqueues")["items"]
            return bool(cqs) and all(any(c["type"] == "Active" and c["status"] == "True"
                                         for c in (q.get("status") or {}).get("conditions", []))
                                     for q in cqs)
        wait_for(active, 120, "Kueue's ClusterQueues active")
        yield proc
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()


# ------------------------------------------------------------------ the replay
@dataclass
class Life:
    """What the recorder saw of one job (scenario seconds)."""

    admitted: bool = False
    running: bool = False
    pending_since: float = 0.0
    run_since: float = 0.0
    types: list[str] = field(default_factory=list)


def replay(s: Session, sc: Scenario, system: str, speedup: float, timeout_s: float,
           volcano: VolcanoSettings | None = None) -> dict:
    """Replay ``sc`` on the running cluster; the result document of ``gpuq simulate``.
    A preemption is a Job suspended again (Kueue) or, for Volcano, which evicts Pods, a
    running Job with fewer Pods ready or done than it has replicas."""
    model = sc.model
    sim = Simulator(model, make_policy("fifo-typed"), "fifo-typed")  # its jobs, not its run
    jobs = sorted(sim.jobs, key=lambda j: (j.submit_s, j.index))
    batch = client.BatchV1Api(s.admin)
    type_of_node = {n.name: n.gpu_type for n in model.cluster.nodes}
    events: list[dict] = []
    lives = {j.spec.name: Life() for j in jobs}
    by_name = {j.spec.name: j for j in jobs}
    t0 = time.monotonic()

    def now() -> float:
        return (time.monotonic() - t0) * speedup

    def submit() -> None:
        for j in jobs:
            delay = t0 + j.submit_s / speedup - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            batch.create_namespaced_job(team_ns(j.request.team),
                                        k8s_job(sc, j, system, speedup, volcano))

    th = threading.Thread(target=submit, daemon=True)
    th.start()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        t = now()
        seen = {}
        for team in sorted({j.request.team for j in jobs}):
            for k in batch.list_namespaced_job(team_ns(team)).items:
                seen[k.metadata.name] = k
        for name, k in seen.items():
            j, life = by_name[name], lives[name]
            if j.status == "waiting":
                j.status, life.pending_since = "pending", j.submit_s
            if j.status == "succeeded":
                continue
            suspended = bool(k.spec.suspend)
            ready = (k.status.ready or 0) if k.status else 0
            # Pods done: counted, or ended and not yet counted (the Job controller counts
            # a Pod after removing its tracking finalizer, pkg/controller/job)
            uncounted = k.status.uncounted_terminated_pods if k.status else None
            finished = ((k.status.succeeded or 0) if k.status else 0) + len(
                (uncounted.succeeded or []) if uncounted else [])
            done = any(c.type == "Complete" and c.status == "True"
                       for c in (k.status.conditions or []))
            if not life.admitted and not suspended:
                life.admitted = True
                events.append({"t": t, "type": "admit", "job": name})
            evicted = (system == "volcano" and life.running and not done
                       and ready + finished < (j.spec.replicas or 1))
            if life.admitted and (suspended or evicted):  # preempted or reclaimed
                life.admitted = not suspended
                if life.running:
                    j.preemptions += 1
                    _stop(j, life, t, finished=False)
                events.append({"t": t, "type": "preempt", "job": name})
            if not life.running and ready >= (j.spec.replicas or 1) and not suspended:
                _run(j, life, t)
                events.append({"t": t, "type": "start", "job": name})
            if done:
                if not life.running:  # started and ended between two polls
                    life.running, life.run_since = True, t
                    j.first_start_s = j.first_start_s if j.first_start_s is not None else t
                    j.start_s = t
                _stop(j, life, t, finished=True)
                events.append({"t": t, "type": "finish", "job": name})
        if all(j.status == "succeeded" for j in jobs):
            break
        time.sleep(POLL_S)
    # the GPU type each job ran on, from its Pods' nodes
    for team in sorted({j.request.team for j in jobs}):
        for p in s.core.list_namespaced_pod(team_ns(team)).items:
            name = (p.metadata.labels or {}).get("gpuq.bench/job")
            if name in lives and p.spec.node_name:
                lives[name].types.append(type_of_node.get(p.spec.node_name) or "")
    return _result(sim, jobs, lives, events, system, speedup, now())


# ------------------------------------------------------------------ gpuq itself
def gpuq_spec(j: SimJob, speedup: float) -> JobSpec:
    """A scenario job as its team submits it to gpuq: the scenario's spec less the
    scenario-only fields, its Pods labelled with the job's name and told (kwok) to
    succeed after the job's run time divided by the speed-up."""
    body = j.spec.model_dump(mode="json", exclude_unset=True,
                             exclude={"submit_at_s", "runtime_s", "speed"})
    return JobSpec.model_validate({
        **body, "labels": {**j.spec.labels, JOB_LABEL: j.spec.name},
        "pod_template": {"metadata": {"annotations": {
            "outcome.gpuq.test/end": "Succeeded",
            "outcome.gpuq.test/run-for": f"{j.runtime_s / speedup:.3f}s"}}}})


def replay_gpuq(s: Session, sc: Scenario, speedup: float, timeout_s: float) -> dict:
    """Replay ``sc`` with gpuq's dispatcher and Kubernetes backend on the running
    cluster; the result document of ``gpuq simulate`` (recorded as :func:`replay` does:
    admission = gpuq bound the job's Pods, start = all of them ready, end = the job
    succeeded in gpuq's store, a preemption = its preemption count grew)."""
    model = sc.model
    sim = Simulator(model, make_policy("fifo-typed"), "fifo-typed")  # its jobs, not its run
    jobs = sorted(sim.jobs, key=lambda j: (j.submit_s, j.index))
    by_name = {j.spec.name: j for j in jobs}
    lives = {j.spec.name: Life() for j in jobs}
    type_of_node = {n.name: n.gpu_type for n in model.cluster.nodes}
    events: list[dict] = []
    kube = RealKube(s)
    db = fresh_database(sc.config_text)
    url = next(db)
    engine = make_engine(url, pool_size=6)
    sf = make_session_factory(engine)
    base, m0 = utcnow(), time.monotonic()

    def clock() -> datetime:  # scenario time, compressed
        return base + timedelta(seconds=(time.monotonic() - m0) * speedup)

    def now() -> float:
        return (time.monotonic() - m0) * speedup

    with sf() as ses:
        types = gpu_type_configs(ses)
    c = make_cluster(kube)
    c.set_gpu_types(types)
    c.start(wait_s=120)
    # 30 s of wall time before a Pod counts as gone (the dispatcher reads scenario time)
    d = Dispatcher(sf, c, clock=clock, interval=1.0, elector=elector(url),
                   grace_seconds=30 * speedup)
    cfg = model.cluster.scheduler
    if cfg.descheduler and cfg.descheduler_interval_s > 0:  # as the simulator runs it
        d.add_step(Descheduler(d, interval=cfg.descheduler_interval_s / speedup))
    loop = threading.Thread(target=d.start, daemon=True, name="gpuq-dispatcher")

    def submit() -> None:
        for j in jobs:
            delay = m0 + j.submit_s / speedup - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with sf() as ses:
                submit_jobs(ses, [gpuq_spec(j, speedup)], now=clock())
                ses.commit()
            d.wake()

    try:
        loop.start()
        th = threading.Thread(target=submit, daemon=True)
        th.start()
        deadline = time.monotonic() + timeout_s
        seen_preempt: dict[str, int] = {}
        while time.monotonic() < deadline:
            t = now()
            with sf() as ses:
                rows = ses.execute(select(JobRow.name, JobRow.status, JobRow.admitted_at,
                                          JobRow.preemption_count)).all()
            ready: dict[str, int] = {}
            for p in s.core.list_namespaced_pod(kube.namespace,
                                                label_selector=JOB_LABEL).items:
                name = p.metadata.labels[JOB_LABEL]
                if name in lives and p.spec.node_name:  # gpuq deletes finished Pods
                    lives[name].types.append(type_of_node.get(p.spec.node_name) or "")
                if p.metadata.deletion_timestamp is None and any(
                        cd.type == "Ready" and cd.status == "True"
                        for cd in (p.status.conditions or [])):
                    ready[name] = ready.get(name, 0) + 1
            for name, status, admitted_at, preempted in rows:
                j, life = by_name[name], lives[name]
                if j.status == "waiting":
                    j.status, life.pending_since = "pending", j.submit_s
                if j.status == "succeeded":
                    continue
                if preempted > seen_preempt.get(name, 0):
                    seen_preempt[name] = preempted
                    life.admitted = False
                    if life.running:
                        j.preemptions += 1
                        _stop(j, life, t, finished=False)
                    events.append({"t": t, "type": "preempt", "job": name})
                if not life.admitted and admitted_at is not None and status in (
                        "admitted", "running", "succeeded"):
                    life.admitted = True
                    events.append({"t": t, "type": "admit", "job": name})
                if not life.running and ready.get(name, 0) >= (j.spec.replicas or 1):
                    _run(j, life, t)
                    events.append({"t": t, "type": "start", "job": name})
                if status == "succeeded":
                    if not life.running:  # started and ended between two polls
                        _run(j, life, t)
                    _stop(j, life, t, finished=True)
                    events.append({"t": t, "type": "finish", "job": name})
            if all(j.status == "succeeded" for j in jobs):
                break
            time.sleep(POLL_S)
    finally:
        d.stop()
        loop.join(30)
        if d.elector is not None:
            d.elector.release()
        c.close()
        engine.dispose()
        kube.core.delete_collection_namespaced_pod(kube.namespace, grace_period_seconds=0)
        db.close()
    return _result(sim, jobs, lives, events, "gpuq", speedup, now())


def _run(j: SimJob, life: Life, t: float) -> None:
    life.running, life.run_since = True, t
    j.wait_s += t - life.pending_since
    j.start_s = t
    if j.first_start_s is None:
        j.first_start_s = t
    j.status = "running"


def _result(sim: Simulator, jobs: list[SimJob], lives: dict[str, Life], events: list[dict],
            system: str, speedup: float, end: float) -> dict:
    for j in jobs:
        if j.status in ("pending", "waiting"):
            j.wait_s += end - lives[j.spec.name].pending_since
    res = SimulationResult(f"{system} (real)", sim.jobs, events, sim._capacity())
    doc = to_json(res)
    for d in doc["jobs"]:
        d["gpu_types"] = sorted(set(lives[d["name"]].types))
    doc["speedup"] = speedup
    return doc


def _stop(j: SimJob, life: Life, t: float, finished: bool) -> None:
    cards = (j.spec.resources.gpus or 0) * (j.spec.replicas or 1)
    j.used_gpu_s += cards * (t - life.run_since)
    life.running = False
    if finished:
        j.status, j.end_s = "succeeded", t
    else:
        j.wasted_gpu_s += cards * (t - life.run_since)
        j.status, j.start_s, life.pending_since = "pending", None, t


# ------------------------------------------------------------------ agreement
def model_doc(model: ScenarioModel, policy: str, settings: dict[str, Any] | None = None
              ) -> dict:
    """Our model's result on the scenario (``settings``: a baseline's, as the suite's
    tuning names them)."""
    doc = to_json(Simulator(model, build(policy, settings), policy).run())
    for d in doc["jobs"]:
        d["gpu_types"] = sorted({a["gpu_type"] for a in d["allocations"]})
    return doc


def first_admissions(doc: dict) -> dict[str, float | None]:
    """Each job's first admission (scenario s; None: never admitted), from the events."""
    out: dict[str, float | None] = {j["name"]: None for j in doc["jobs"]}
    for e in doc["events"]:
        if e["type"] == "admit" and out.get(e["job"]) is None:
            out[e["job"]] = e["t"]
    return out


def first_starts(doc: dict) -> dict[str, float | None]:
    return {j["name"]: j["first_start_s"] for j in doc["jobs"]}


def agreement(real: dict, modelled: dict, tolerance_s: float,
              on: str = "start") -> dict[str, Any]:
    """How the model and the real system agree on one scenario, on each job's first start
    (``on="start"``: every Pod running; the model's admission is its start, as it admits
    only what it can place) or first admission (``on="admit"``: Kueue admits by quota and
    its Pods may then wait for kube-scheduler):

    - ``order``: of the pairs of jobs both started, the share the two start in the same
      order (a pair within ``tolerance_s`` of each other in either counts as the same);
    - ``starts``: the share of jobs first started within ``tolerance_s`` of each other
      (never started in both counts as agreeing);
    - ``victims``: Jaccard index of the sets of jobs preempted (1.0 when both are empty);
    - ``types``: the share of jobs both ran that ran on the same GPU types;
    - ``lag_s``: the real system's median delay over the model's, over the jobs admitted
      in both (its reaction time: controller, cycle and Pod start-up latencies);
    - ``differ``: the jobs whose admission differs, for the cause to be read."""
    when = first_starts if on == "start" else first_admissions
    r, m = when(real), when(modelled)
    rj = {j["name"]: j for j in real["jobs"]}
    mj = {j["name"]: j for j in modelled["jobs"]}
    names = sorted(r)
    both = [n for n in names if r[n] is not None and m[n] is not None]
    same = pairs = 0
    for i, a in enumerate(both):
        for b in both[i + 1:]:
            dr, dm = r[a] - r[b], m[a] - m[b]  # type: ignore[operator]
            pairs += 1
            same += (abs(dr) <= tolerance_s or abs(dm) <= tolerance_s or (dr > 0) == (dm > 0))
    ok, differ = 0, []
    for n in names:
        a, b = r[n], m[n]
        if (a is None and b is None) or (a is not None and b is not None
                                         and abs(a - b) <= tolerance_s):
            ok += 1
        else:
            differ.append({"job": n, f"real_{on}_s": a, f"model_{on}_s": b})
    vr = {n for n in names if rj[n]["preemptions"]}
    vm = {n for n in names if mj[n]["preemptions"]}
    ran = [n for n in names if rj[n]["gpu_types"] and mj[n]["gpu_types"]]
    lags = sorted(r[n] - m[n] for n in both)  # type: ignore[operator]
    return {"order": same / pairs if pairs else 1.0, "starts": ok / len(names),
            "victims": len(vr & vm) / len(vr | vm) if vr | vm else 1.0,
            "types": sum(rj[n]["gpu_types"] == mj[n]["gpu_types"] for n in ran) / len(ran)
            if ran else 1.0,
            "lag_s": lags[len(lags) // 2] if lags else 0.0,
            "victims_real": sorted(vr), "victims_model": sorted(vm), "differ": differ}


def agreement_table(rows: list[tuple[str, int, dict[str, Any]]], tolerance_s: float,
                    victims: bool = True) -> str:
    """The Markdown table of docs/evaluation.md's fidelity sections: a row per scenario
    (name, jobs, :func:`agreement`); ``victims=False`` for a system that never preempts."""
    head = ["scenario", "jobs", "same start order", f"started within {tolerance_s:g} s",
            *(["same victims"] if victims else []), "same GPU types", "median lag s"]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for name, n, ag in rows:
        cells = [name, str(n), f"{ag['order']:.0%}", f"{ag['starts']:.0%}",
                 *([f"{ag['victims']:.0%}"] if victims else []), f"{ag['types']:.0%}",
                 f"{ag['lag_s']:.0f}"]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


# ------------------------------------------------------------------ the command
def run(scenario: Path, system: str, speedup: float, timeout_s: float,
        kueue_settings: KueueSettings | None = None,
        volcano_settings: VolcanoSettings | None = None) -> dict:
    sc = Scenario.load(scenario)
    model = sc.model
    with running_control_plane(scheduler_qps=100) as cp:
        s = Session(cp)
        for node in kwok_nodes(sc):
            s.core.create_node(node)
        names = {n.name for n in model.cluster.nodes}

        def ready() -> bool:
            return sum(n.metadata.name in names and any(
                c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))
                for n in s.core.list_node().items) == len(names)
        wait_for(ready, 120, "nodes Ready")
        for team in sorted({sp.team for sp in model.specs} | set(model.cluster.teams)):
            s.core.create_namespace({"metadata": {"name": team_ns(team)}})
            wait_for(lambda t=team: _has_default_sa(s, team_ns(t)), 60, "default ServiceAccount")
        weights = {t: info.weight for t, info in model.cluster.teams.items()}
        if system == "gpuq":
            doc = replay_gpuq(s, sc, speedup, timeout_s)
        else:
            with (running_kueue(s, sc, kueue_settings) if system == "kueue"
                  else running_volcano(s, weights, volcano_settings) if system == "volcano"
                  else contextlib.nullcontext()):
                doc = replay(s, sc, system, speedup, timeout_s, volcano_settings)
        cp.check_alive()
    doc["scenario"] = str(scenario)
    return doc


def _has_default_sa(s: Session, ns: str) -> bool:
    return any(sa.metadata.name == "default"
               for sa in s.core.list_namespaced_service_account(ns).items)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="+", type=Path)
    ap.add_argument("--system", choices=SYSTEMS, default="kueue")
    ap.add_argument("--speedup", type=float, default=20.0,
                    help="scenario seconds per wall second (default 20)")
    ap.add_argument("--tolerance", type=float, default=60.0,
                    help="admissions this close (scenario s) agree (default 60)")
    ap.add_argument("--timeout", type=float, default=600.0, help="wall seconds per scenario")
    ap.add_argument("--compare", action="store_true", help="run our model beside, print agreement")
    ap.add_argument("--out", type=Path, help="result JSON (a folder with several scenarios)")
    ap.add_argument("--kueue-settings", type=settings_arg("kueue"), default={},
                    help="the Kueue model's settings, as the tuning names them, e.g. "
                    "flavor_order=fastest,nominal=cohort,cover_cpu_memory=true (default: "
                    "its defaults); the real Kueue is configured the same way")
    ap.add_argument("--volcano-settings", default={}, type=settings_arg("volcano"),
                    help="the Volcano model's settings, e.g. reclaim=False (default: its "
                    "defaults, the tuned setting); the real Volcano is configured the same way")
    a = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
          f"load {os.getloadavg()[0]:.1f}; speed-up {a.speedup:g}x, tolerance {a.tolerance:g} s")
    rows = []
    for sc in a.scenarios:
        t = time.monotonic()
        doc = run(sc, a.system, a.speedup, a.timeout, KueueSettings(**a.kueue_settings),
                  VolcanoSettings(**a.volcano_settings))
        s = doc["summary"]
        print(f"{sc.name}: {a.system} (real): {s['jobs']} jobs, {s['finished']} finished in "
              f"{time.monotonic() - t:.0f} s wall")
        if a.out:
            out = a.out / f"{sc.stem}-{a.system}.json" if len(a.scenarios) > 1 else a.out
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(json.dumps(doc, indent=1))
        if a.compare and a.system in MODEL_OF:
            m = model_doc(Scenario.load(sc).model, MODEL_OF[a.system],
                          {"kueue": a.kueue_settings, "volcano": a.volcano_settings}.get(
                              a.system) or None)
            ag = agreement(doc, m, a.tolerance)
            rows.append((sc.stem, s["jobs"], ag))
            for d in ag["differ"]:
                print(f"  differs: {d}")
            print(f"  victims real {ag['victims_real']}, model {ag['victims_model']}")
    if rows:
        print(agreement_table(rows, a.tolerance))


if __name__ == "__main__":
    main()

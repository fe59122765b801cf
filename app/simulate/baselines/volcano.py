"""``volcano``: Volcano's session with the proportion, drf, gang, priority and binpack plugins.

Modelled from Volcano's documentation and plugin sources (read, not
copied), volcano-sh/volcano: ``docs/design/proportion.md`` and
``pkg/scheduler/plugins/proportion/proportion.go`` (deserved share by queue
weight, overused queues, reclaimable), ``pkg/scheduler/plugins/drf/drf.go``
(job order by dominant share), ``pkg/scheduler/plugins/gang/gang.go``
(``minAvailable``: all or nothing, gangs not preemptible below it),
``pkg/scheduler/plugins/priority/priority.go`` (job order by priority),
``pkg/scheduler/plugins/binpack/binpack.go`` (node order: fullest first) and
``pkg/scheduler/actions/{allocate,reclaim}`` (the actions). The
configuration an operator sets is :class:`VolcanoSettings` (tuned on the
tuning windows by :mod:`app.simulate.baseline_tuning`):

* **actions**: ``"enqueue, allocate, backfill"`` (the chart's default
  ``installer/helm/chart/volcano/config/volcano-scheduler.conf``; backfill
  only places best-effort pods, which these jobs are not) or, with
  ``reclaim``, ``"enqueue, allocate, backfill, reclaim"``.
* **enqueue** + **overcommit** (``actions/enqueue/enqueue.go``,
  ``plugins/overcommit/overcommit.go``): only an enqueued job (its PodGroup
  ``Inqueue``) is allocated or reclaims; a job is enqueued while the enqueued
  jobs' minimum resources with its own stay within ``overcommit_factor``
  (the plugin's default 1.2) times the cluster's allocatable less what is in
  use, in every resource it requests (cards, CPU, memory). So on a full
  cluster a job larger than a fifth of it waits, not enqueued, for running
  work to end -- it neither starts nor reclaims. ``overcommit_factor: None``
  is the conf without the plugin (every job enqueued). A job whose Pods were
  evicted is Pending again and enqueued anew.
* **Queues**: one per team, ``weight`` = the team's weight. **Resources**
  (``resource_model``): ``affinity`` -- the usual setup: pods request
  ``nvidia.com/gpu`` (cards, no CU) with a required node affinity on the GPU
  product label listing the models the job's request allows (memory fit
  included), so a queue's share is counted in cards of any model; with
  ``prefer_speed`` a preferred affinity (``nodeorder``'s ``nodeaffinity``)
  puts a job on the fastest allowed model that has room (the operator's
  speed table ``GpuType.speed``, the one gpuq reads), else ``binpack`` picks
  among the allowed models' nodes. ``pinned`` -- one resource name per GPU
  model (e.g. ``nvidia.com/a100-80g``), each job pinned to one model when
  submitted: among the allowed models, a stable pick weighted by card count
  (a hash of the job id), as users each picking a model would spread.
* **proportion**: each queue's *deserved* share per resource is the
  water-filling of the capacity by weight, capped at the queue's request
  (what it runs plus what it waits for); repeated until the capacity or every
  request is used up. A queue whose allocation has reached its deserved share
  in every resource is *overused* and gets nothing more in this session;
  and a job is allocated only while its queue's allocation plus the job stays
  within the deserved share (``proportion.go``'s ``queueAllocatable``:
  ``futureUsed.LessEqualWithDimension(deserved, request)``, the per-task
  check). Queues are served lowest share first (share = max over resources
  of allocated / deserved).
* **priority** + **drf** + creation time order the jobs within a queue
  (higher priority first; then lower dominant share of the job; a pending
  job holds nothing, so creation time decides).
* **gang**: a job is allocated only with at least ``min_available`` of its
  replicas; otherwise its tentative allocations are discarded.
* **binpack** node order: the node with the highest weighted use of CPU,
  memory and the GPU resource after the placement.
* **reclaim**: a job that does not fit, of a queue that is not overused and
  stays within its deserved share of the job's GPU model with the job
  (``proportion``'s preemptive rule), may evict running jobs of other queues
  whose allocation of that model exceeds their deserved share
  (``proportion``'s reclaimable rule), on one node, lowest priority and newest first, only
  single-replica jobs (``gang``'s preemptable rule keeps a gang at its
  ``min_available``), until the job fits on one set of nodes.

Left out: no hierarchical queues, no ``capability`` caps, CPU and memory are not counted in
the deserved shares (the GPU is every job's dominant resource here), no
task-level partial eviction of gangs, no preempt action
(all jobs of the scenarios share one priority class or are P0/P1/P2 from
gpuq's tiers, which Volcano would express as priority classes; ``preempt``
within a queue is not modelled). A reclaimed job is evicted and admitted in
the same cycle (Volcano pipelines it until the victims are gone). Which node a
job reclaims on: the model takes the nodes by name; Volcano takes them in the
order its parallel predicate workers return them (``reclaimForTask``), which
no setting fixes, so its victims can differ where several nodes would do.
"""

from __future__ import annotations

import hashlib
from collections import defaultdict
from dataclasses import dataclass

from app.scheduling.model import Admission, CycleResult, JobRequest, Preemption, Snapshot
from app.scheduling.state import ClusterState
from app.simulate.baselines.common import (
    Placer,
    TypeOption,
    job_cards_by_type,
    most_allocated,
    type_options,
)

EPS = 1e-9
Vec = dict[str, float]  # resource (GPU model) -> cards


def pinned_option(job: JobRequest, options: list[TypeOption],
                  capacity: dict[str, float]) -> TypeOption | None:
    """The one GPU model this job's pods request: a stable pick weighted by card count."""
    # each GPU option with the capacity of its model (the model is known non-None here)
    gpu = [(o, o.gpu_type, capacity[o.gpu_type]) for o in options
           if o.gpu_type is not None and capacity.get(o.gpu_type, 0) > 0]
    if not gpu:
        return options[0] if options and options[0].gpu_type is None else None
    if len(gpu) == 1:
        return gpu[0][0]
    total = sum(cap for _o, _t, cap in gpu)
    h = int.from_bytes(hashlib.sha256(job.id.encode()).digest()[:8], "big") / 2**64
    x = h * total
    for o, _t, cap in sorted(gpu, key=lambda g: g[1]):
        x -= cap
        if x < 0:
            return o
    return gpu[-1][0]


def deserved_shares(capacity: Vec, weights: dict[str, float],
                    requests: dict[str, Vec]) -> dict[str, Vec]:
    """proportion's water-filling, per resource: weight-proportional, capped at request."""
    out: dict[str, Vec] = {q: defaultdict(float) for q in weights}
    for r, cap in capacity.items():
        open_q = {q for q in weights if requests.get(q, {}).get(r, 0.0) > EPS}
        remaining = cap
        while open_q and remaining > EPS:
            total_w = sum(weights[q] for q in open_q)
            met = set()
            given = 0.0
            for q in sorted(open_q):
                want = requests[q][r] - out[q][r]
                add = min(remaining * weights[q] / total_w, want)
                out[q][r] += add
                given += add
                if out[q][r] >= requests[q][r] - EPS:
                    met.add(q)
            remaining -= given
            if not met:
                break
            open_q -= met
    return out


@dataclass(frozen=True, slots=True)
class VolcanoSettings:
    """The scheduler configuration and queue setup an operator chooses (module docstring)."""

    resource_model: str = "affinity"  # affinity | pinned
    prefer_speed: bool = True  # affinity only: a preferred node affinity for faster models
    reclaim: bool = True  # the reclaim action enabled
    per_task_check: bool = True  # proportion's queueAllocatable (always on upstream)
    # the overcommit plugin's factor (the chart's conf has the plugin, its default 1.2);
    # None: the plugin taken out of the conf, every job enqueued at once
    overcommit_factor: float | None = 1.2

    def __post_init__(self) -> None:
        if self.resource_model not in ("affinity", "pinned"):
            raise ValueError("resource_model must be affinity or pinned")
        if self.overcommit_factor is not None and self.overcommit_factor < 1.0:
            raise ValueError("overcommit_factor is at least 1 (Volcano replaces a smaller one)")


class VolcanoPolicy:
    """One Volcano scheduling session per cycle."""

    name = "volcano"

    def __init__(self, settings: VolcanoSettings | None = None) -> None:
        self.settings = settings or VolcanoSettings()
        self.capacity: Vec = {}  # GPU model -> cards
        self.res_capacity: Vec = {}  # the queues' resources -> cards
        self.total: Vec = {}  # the cluster's allocatable: GPU resources, cpu, memory
        # jobs whose PodGroup is Inqueue (enqueued, not yet running); a PodGroup keeps its
        # phase from session to session, and one whose Pods were evicted is Pending again
        # (pkg/scheduler/framework/session.go, getPodGroupPhase)
        self.inqueue: set[str] = set()

    def res(self, opt: TypeOption) -> str:
        """The resource name a job's pods request on this option."""
        return "nvidia.com/gpu" if self.settings.resource_model == "affinity" else str(
            opt.gpu_type)

    def options(self, job: JobRequest, snap: Snapshot) -> list[TypeOption]:
        """The job's GPU models in the order its pods would try them (one when pinned)."""
        opts = type_options(job, snap)
        if self.settings.resource_model == "pinned":
            one = pinned_option(job, opts, self.capacity)
            return [one] if one is not None else []
        gpu = [o for o in opts if o.gpu_type is not None and self.capacity.get(o.gpu_type, 0) > 0]
        if not gpu:
            return opts[:1] if opts and opts[0].gpu_type is None else []
        if self.settings.prefer_speed:
            gpu.sort(key=lambda o: (-snap.gpu_types[o.gpu_type].speed, o.gpu_type))  # type: ignore[index]
        return gpu

    def place(self, job: JobRequest, opts: list[TypeOption], placer: Placer, snap: Snapshot):
        """(option, placements) or None. With ``prefer_speed`` the options go in tiers of
        equal speed, fastest first (the preferred affinity's weights); within a tier, and
        without the preference, every allowed model's best node by binpack, the fullest
        wins (ties by model name, where Volcano picks among equal scores at random)."""
        if self.settings.resource_model == "pinned" or len(opts) < 2:
            for o in opts:
                got = placer.place(job, o)
                if got:
                    return o, got
            return None
        if not self.settings.prefer_speed:
            return self._binpack(job, opts, placer)
        tiers: dict[float, list[TypeOption]] = defaultdict(list)
        for o in opts:
            tiers[snap.gpu_types[o.gpu_type].speed if o.gpu_type else 0.0].append(o)
        for speed in sorted(tiers, reverse=True):
            got = self._binpack(job, tiers[speed], placer)
            if got:
                return got
        return None

    def _binpack(self, job: JobRequest, opts: list[TypeOption], placer: Placer):
        """Every option's best node by binpack; the fullest wins."""
        if len(opts) == 1:
            got = placer.place(job, opts[0])
            return (opts[0], got) if got else None
        best = None
        for o in opts:
            got = placer.place(job, o)
            if not got:
                continue
            for p in got:
                placer.state._apply(p, -1)  # a rollback: only comparing
            node = placer.state.nodes[got[0].node]
            key = (most_allocated(node, got[0]), o.gpu_type or "")
            if best is None or key < best[0]:
                best = (key, o)
        if best is None:
            return None
        got = placer.place(job, best[1], memo=False)
        return (best[1], got) if got else None

    def __call__(self, snap: Snapshot) -> CycleResult:
        if not self.capacity:
            cap: Vec = defaultdict(float)
            for n in snap.nodes:
                if n.gpu_type and n.schedulable:
                    cap[n.gpu_type] += len(n.devices)
            self.capacity = dict(cap)
            if self.settings.resource_model == "affinity":
                self.res_capacity = {"nvidia.com/gpu": sum(cap.values())}
            else:
                self.res_capacity = dict(cap)
            live = [n for n in snap.nodes if n.schedulable]
            self.total = {**self.res_capacity, "cpu": sum(n.cpu for n in live),
                          "memory": sum(n.memory_gb for n in live)}
        result = CycleResult()
        weights: dict[str, float] = {}
        for j in [*snap.pending, *(r.request for r in snap.running)]:
            info = snap.teams.get(j.team)
            weights[j.team] = info.weight if info else 1.0
        affinity = self.settings.resource_model == "affinity"

        def held(r) -> Vec:
            out: Vec = defaultdict(float)
            for t, c in job_cards_by_type(r, snap.gpu_types).items():
                out["nvidia.com/gpu" if affinity else t] += c
            return out

        allocated: dict[str, Vec] = {q: defaultdict(float) for q in weights}
        for r in snap.running:
            for k, c in held(r).items():
                allocated[r.request.team][k] += c
        opts_of: dict[str, list[TypeOption]] = {}
        requests: dict[str, Vec] = {q: defaultdict(float, allocated[q]) for q in weights}
        for j in snap.pending:
            opts = self.options(j, snap)
            if not opts:
                result.unschedulable[j.id] = "volcano: no GPU model the job's request allows"
                continue
            opts_of[j.id] = opts
            if opts[0].gpu_type is not None:
                requests[j.team][self.res(opts[0])] += min(o.cards for o in opts)
        deserved = deserved_shares(self.res_capacity, weights, requests)

        def share(q: str) -> float:
            return max((allocated[q][r] / d for r, d in deserved[q].items() if d > EPS),
                       default=0.0)

        def overused(q: str) -> bool:
            return all(deserved[q].get(r, 0.0) <= allocated[q][r] + EPS
                       for r in self.res_capacity)

        def allocatable(q: str, opt: TypeOption) -> bool:
            if opt.gpu_type is None or not self.settings.per_task_check:
                return True
            r = self.res(opt)
            return allocated[q][r] + opt.cards <= deserved[q].get(r, 0.0) + EPS

        state = ClusterState.from_snapshot(snap)
        placer = Placer(snap, state, most_allocated)
        jobs: dict[str, list[JobRequest]] = defaultdict(list)
        for j in snap.pending:
            if j.id in opts_of:
                jobs[j.team].append(j)
        for queue in jobs.values():  # priority, then drf (0 for pending jobs), then creation
            queue.sort(key=lambda j: (-j.priority_value, j.submitted_at, j.id))
        jobs = self._enqueue(snap, jobs, opts_of, share, held, result)
        running = {r.request.id: r for r in snap.running}
        # allocate: pop the queue with the lowest share, its first job, until all are tried
        left = {q: list(js) for q, js in jobs.items() if js}
        failed: list[JobRequest] = []
        while left:
            q = min(left, key=lambda q: (share(q), q))
            if overused(q):
                for j in left.pop(q):
                    result.reasons[j.id] = f"volcano: queue {q} is overused (at its deserved share)"
                continue
            job = left[q].pop(0)
            if not left[q]:
                del left[q]
            result.order.append(job.id)
            opts = [o for o in opts_of[job.id] if allocatable(q, o)]
            if not opts:
                result.reasons[job.id] = (f"volcano: queue {q} would exceed its deserved share "
                                          "with this job")
                continue
            got = self.place(job, opts, placer, snap)
            if got:
                opt, placed = got
                result.admissions.append(Admission(job.id, placed))
                if opt.gpu_type:
                    allocated[q][self.res(opt)] += opt.cards
            else:
                failed.append(job)
        if not self.settings.reclaim:
            for job in failed:
                result.reasons[job.id] = "volcano: no node has room (gang not satisfied)"
            return result
        # reclaim: jobs of queues that are not overused take from queues above deserved
        for job in failed:
            q = job.team
            done = False
            for opt in opts_of[job.id]:
                res = self.res(opt)
                if opt.gpu_type is None or overused(q) or (
                    allocated[q][res] + opt.cards > deserved[q].get(res, 0.0) + EPS
                ):  # proportion's preemptive rule: the reclaimer stays within its deserved share
                    continue
                victims = self._reclaim(job, opt, snap, running, allocated, deserved, placer,
                                        held)
                if victims is None:
                    continue
                placer.remove(victims)
                placed = placer.place(job, opt)
                if not placed:
                    raise AssertionError("volcano: reclaim left the job unplaceable")
                for v in victims:
                    del running[v.request.id]
                    for k, c in held(v).items():
                        allocated[v.request.team][k] -= c
                    result.preemptions.append(Preemption(
                        v.request.id, f"volcano: reclaimed by queue {q} (above its deserved share)",
                        by_job=job.id, kind="reclaim"))
                allocated[q][res] += opt.cards
                result.admissions.append(Admission(job.id, placed))
                done = True
                break
            if not done:
                result.reasons[job.id] = "volcano: no node has room and nothing is reclaimable"
        return result

    def _enqueue(self, snap: Snapshot, jobs: dict[str, list[JobRequest]],
                 opts_of: dict[str, list[TypeOption]], share, held, result: CycleResult
                 ) -> dict[str, list[JobRequest]]:
        """The enqueue action: only enqueued jobs are allocated or reclaim
        (``actions/allocate``, ``actions/reclaim``: a Pending PodGroup is skipped). Queues
        in proportion's order (lowest share first; the share does not change during the
        action), one job per turn (``actions/enqueue/enqueue.go``); the ``overcommit``
        plugin (``plugins/overcommit/overcommit.go``) admits a job to the queue only while
        the enqueued jobs' minimum resources with its own stay within the factor times
        the cluster's allocatable less what is in use, in each resource the job requests;
        ``proportion`` adds no test without a queue ``capability``. Returns the queues'
        enqueued jobs, in their order."""
        pending = {j.id for js in jobs.values() for j in js}
        self.inqueue &= pending
        factor = self.settings.overcommit_factor
        if factor is None:
            self.inqueue |= pending
            return jobs

        def minimum(j: JobRequest) -> Vec:
            part = max(1, j.min_available) / max(1, j.replicas)
            out: Vec = defaultdict(float)
            opt = opts_of[j.id][0]
            if opt.gpu_type is not None:
                out[self.res(opt)] += opt.cards * part
            out["cpu"] += j.cpu * max(1, j.min_available)
            out["memory"] += j.memory_gb * max(1, j.min_available)
            return out

        idle: Vec = {k: v * factor for k, v in self.total.items()}
        for r in snap.running:
            for k, c in held(r).items():
                idle[k] = idle.get(k, 0.0) - c
            n = len(r.placements)
            idle["cpu"] -= r.request.cpu * n
            idle["memory"] -= r.request.memory_gb * n
        inq: Vec = defaultdict(float)
        for js in jobs.values():
            for j in js:
                if j.id in self.inqueue:
                    for k, v in minimum(j).items():
                        inq[k] += v
        for q in sorted(jobs, key=lambda q: (share(q), q)):
            for j in jobs[q]:
                if j.id in self.inqueue:
                    continue
                need = minimum(j)
                if all(inq[k] + v <= idle.get(k, 0.0) + EPS for k, v in need.items() if v > EPS):
                    self.inqueue.add(j.id)
                    for k, v in need.items():
                        inq[k] += v
                else:
                    result.reasons[j.id] = (
                        "volcano: not enqueued: the enqueued jobs with this one would exceed "
                        f"{factor:g} x the cluster less what is in use (overcommit)")
        return {q: [j for j in js if j.id in self.inqueue] for q, js in jobs.items()}

    def _reclaim(self, job, opt, snap, running, allocated, deserved, placer, held):
        """Victims on one node that make ``job`` fit, or None (the reclaim action walks the
        nodes and evicts reclaimable tasks of one node until the task fits there)."""
        t = opt.gpu_type
        on_node: dict[str, list] = defaultdict(list)
        for r in running.values():
            y = r.request.team
            if y == job.team or r.request.min_available > 1:
                continue  # gang: a gang is never cut below min_available
            for p in r.placements:
                if p.gpu_type == t:
                    on_node[p.node].append(r)
        for node in sorted(on_node):
            cands = sorted({r.request.id: r for r in on_node[node]}.values(), key=lambda r: (
                r.request.priority_value, -r.started_at, r.request.id))
            alloc = {q: dict(v) for q, v in allocated.items()}
            victims = []
            for r in cands:
                y = r.request.team
                h = held(r)
                if all(alloc[y].get(k, 0.0) <= deserved[y].get(k, 0.0) + EPS for k in h):
                    continue  # proportion: only a queue above its deserved share gives back
                victims.append(r)
                for k, c in h.items():
                    alloc[y][k] = alloc[y].get(k, 0.0) - c
                if placer.fits_without(job, opt, victims):
                    return victims
        return None


def volcano(**settings: object) -> VolcanoPolicy:
    """A Volcano model with these :class:`VolcanoSettings` (the defaults when none)."""
    return VolcanoPolicy(VolcanoSettings(**settings))  # type: ignore[arg-type]

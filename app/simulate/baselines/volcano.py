"""``volcano``: Volcano's session with the proportion, drf, gang, priority and binpack plugins.

Modelled from Volcano's documentation and plugin sources (read, not
copied), volcano-sh/volcano: ``docs/design/proportion.md`` and
``pkg/scheduler/plugins/proportion/proportion.go`` (deserved share by queue
weight, overused queues, reclaimable), ``pkg/scheduler/plugins/drf/drf.go``
(job order by dominant share), ``pkg/scheduler/plugins/gang/gang.go``
(``minAvailable``: all or nothing, gangs not preemptible below it),
``pkg/scheduler/plugins/priority/priority.go`` (job order by priority),
``pkg/scheduler/plugins/binpack/binpack.go`` (node order: fullest first) and
``pkg/scheduler/actions/{allocate,reclaim}`` (the actions), with
``actions: "enqueue, allocate, reclaim"``.

The configuration modelled:

* **Queues**: one per team, ``weight`` = the team's weight. **Resources**:
  one resource name per GPU model (e.g. ``nvidia.com/a100-80g``), no CU. A
  pod requests exactly one of them, so each job is pinned to one GPU model
  when it is submitted: among the models its request allows (memory fit
  included), chosen at random in proportion to each model's card count
  (a stable hash of the job id), as a population of users each picking a
  model for their job would spread.
* **proportion**: each queue's *deserved* share per resource is the
  water-filling of the capacity by weight, capped at the queue's request
  (what it runs plus what it waits for); repeated until the capacity or every
  request is used up. A queue whose allocation has reached its deserved share
  in every resource is *overused* and gets nothing more in this session.
  Queues are served lowest share first (share = max over resources of
  allocated / deserved).
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

Left out: no enqueue overcommit factor (every job is enqueued), no
hierarchical queues, no ``capability`` caps, no backfill action for
best-effort pods, no task-level partial eviction of gangs, no preempt action
(all jobs of the scenarios share one priority class or are P0/P1/P2 from
gpuq's tiers, which Volcano would express as priority classes; ``preempt``
within a queue is not modelled). A reclaimed job is evicted and admitted in
the same cycle (Volcano pipelines it until the victims are gone).
"""

from __future__ import annotations

import hashlib
from collections import defaultdict

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
    gpu = [o for o in options if o.gpu_type is not None and capacity.get(o.gpu_type, 0) > 0]
    if not gpu:
        return options[0] if options and options[0].gpu_type is None else None
    if len(gpu) == 1:
        return gpu[0]
    total = sum(capacity[o.gpu_type] for o in gpu)  # type: ignore[index]
    h = int.from_bytes(hashlib.sha256(job.id.encode()).digest()[:8], "big") / 2**64
    x = h * total
    for o in sorted(gpu, key=lambda o: o.gpu_type or ""):
        x -= capacity[o.gpu_type]  # type: ignore[index]
        if x < 0:
            return o
    return gpu[-1]


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


class VolcanoPolicy:
    """One Volcano scheduling session per cycle."""

    name = "volcano"

    def __init__(self) -> None:
        self.capacity: Vec = {}

    def __call__(self, snap: Snapshot) -> CycleResult:
        if not self.capacity:
            cap: Vec = defaultdict(float)
            for n in snap.nodes:
                if n.gpu_type and n.schedulable:
                    cap[n.gpu_type] += len(n.devices)
            self.capacity = dict(cap)
        result = CycleResult()
        weights: dict[str, float] = {}
        for j in [*snap.pending, *(r.request for r in snap.running)]:
            info = snap.teams.get(j.team)
            weights[j.team] = info.weight if info else 1.0
        allocated: dict[str, Vec] = {q: defaultdict(float) for q in weights}
        for r in snap.running:
            for t, c in job_cards_by_type(r, snap.gpu_types).items():
                allocated[r.request.team][t] += c
        pinned: dict[str, TypeOption] = {}
        requests: dict[str, Vec] = {q: defaultdict(float, allocated[q]) for q in weights}
        for j in snap.pending:
            opt = pinned_option(j, type_options(j, snap), self.capacity)
            if opt is None:
                result.unschedulable[j.id] = "volcano: no GPU model the job's request allows"
                continue
            pinned[j.id] = opt
            if opt.gpu_type is not None:
                requests[j.team][opt.gpu_type] += opt.cards
        deserved = deserved_shares(self.capacity, weights, requests)

        def share(q: str) -> float:
            return max((allocated[q][r] / d for r, d in deserved[q].items() if d > EPS),
                       default=0.0)

        def overused(q: str) -> bool:
            return all(deserved[q].get(r, 0.0) <= allocated[q][r] + EPS
                       for r in self.capacity)

        state = ClusterState.from_snapshot(snap)
        placer = Placer(snap, state, most_allocated)
        jobs: dict[str, list[JobRequest]] = defaultdict(list)
        for j in snap.pending:
            if j.id in pinned:
                jobs[j.team].append(j)
        for q in jobs.values():  # priority, then drf (0 for pending jobs), then creation
            q.sort(key=lambda j: (-j.priority_value, j.submitted_at, j.id))
        running = {r.request.id: r for r in snap.running}
        # allocate: pop the queue with the lowest share, its first job, until all are tried
        left = {q: list(js) for q, js in jobs.items()}
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
            opt = pinned[job.id]
            placed = placer.place(job, opt)
            if placed:
                result.admissions.append(Admission(job.id, placed))
                if opt.gpu_type:
                    allocated[q][opt.gpu_type] += opt.cards
            else:
                failed.append(job)
        # reclaim: jobs of queues that are not overused take from queues above deserved
        for job in failed:
            q = job.team
            opt = pinned[job.id]
            t = opt.gpu_type
            if t is None or overused(q) or (
                allocated[q][t] + opt.cards > deserved[q].get(t, 0.0) + EPS
            ):  # proportion's preemptive rule: the reclaimer stays within its deserved share
                result.reasons[job.id] = "volcano: no node has room (gang not satisfied)"
                continue
            victims = self._reclaim(job, opt, snap, running, allocated, deserved, placer)
            if victims is None:
                result.reasons[job.id] = "volcano: no node has room and nothing is reclaimable"
                continue
            placer.remove(victims)
            placed = placer.place(job, opt)
            if not placed:
                raise AssertionError("volcano: reclaim left the job unplaceable")
            for v in victims:
                del running[v.request.id]
                for t, c in job_cards_by_type(v, snap.gpu_types).items():
                    allocated[v.request.team][t] -= c
                result.preemptions.append(Preemption(
                    v.request.id, f"volcano: reclaimed by queue {q} (above its deserved share)",
                    by_job=job.id, kind="reclaim"))
            allocated[q][opt.gpu_type] += opt.cards
            result.admissions.append(Admission(job.id, placed))
        return result

    def _reclaim(self, job, opt, snap, running, allocated, deserved, placer):
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
                if alloc[y].get(t, 0.0) <= deserved[y].get(t, 0.0) + EPS:
                    continue  # proportion: only a queue above its deserved share gives back
                victims.append(r)
                for k, c in job_cards_by_type(r, snap.gpu_types).items():
                    alloc[y][k] = alloc[y].get(k, 0.0) - c
                if placer.fits_without(job, opt, victims):
                    return victims
        return None


def volcano() -> VolcanoPolicy:
    return VolcanoPolicy()

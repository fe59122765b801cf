"""The simulator: replay a scenario's jobs in virtual time through a policy.

Event-driven: a heap of arrivals, finishes and wake-ups. At each event
time, finished jobs free their capacity, arrivals join the queue, and
one scheduling cycle runs on a fresh :class:`Snapshot` through the policy
picked by name (:mod:`app.simulate.all_policies`), exactly what the live dispatcher
calls. Decisions are applied as data: admissions start (run time
``runtime_s / speed[type]``), preemptions requeue the job with its
original submit time (``wait_s`` counts every pending second), lease
grants become ``lease_start``/``lease_end`` events.

Descheduler ticks: with the ``gpuq`` policy, the live service's second loop
(``app/scheduling/descheduler.py``: room for P0, defragment moves) runs at
multiples of ``scheduler.descheduler_interval_s`` of virtual time, and its
result is applied like a cycle's (a move is a ``preempt`` and an ``admit``
of the same job at the same instant, as the dispatcher persists it). Ticks
are only scheduled while some running job could make room for a pending job
the descheduler looks at (a P0 job, or one that needs a whole node): with
nothing running it can do nothing, so an idle queue never spins and every
run ends. ``scheduler: {descheduler: false}`` turns it off to compare.

This is gpuq's one event loop in virtual time. Three things run on it:
``gpuq simulate`` (a scenario from an empty cluster), the estimated starts
(:mod:`app.simulate.estimate`, the live snapshot forward) and the tuner's
what-if (:mod:`app.tuning.whatif`, the live snapshot plus the recent
window's arrivals). It is the one kept because it is the complete one: the
live dispatcher's order of applying decisions, leases, the descheduler,
restarts and failures are here and checked against the dispatcher
(``tests/integration/test_sim_matches_dispatcher.py``); the other two are
its subclasses that start from a snapshot and switch parts off through the
hooks below, so they cannot drift from it. The FGD fill protocol has no
clock and no departures and offers its pods in a fixed order
(:mod:`app.simulate.fill` says why that is a loop, not events); its
policies are the same baselines (:mod:`app.simulate.baselines`).

Extension points: ``Simulator.run_time(job, placements)`` returns
``(seconds, outcome)`` where outcome is ``"finish"``, ``"fail"`` (the OOM
rule overrides it) or ``"time_limit"`` (a run stopped at the job's
``time_limit_s``: the job ends failed, as the live dispatcher ends it),
``Simulator.on_fail`` decides what a failure does (requeue or give up),
``wants_cycle``/``finished``/``close_waits`` say when a cycle runs, when
the run stops and how the still-queued are counted,
``snapshot``/``apply`` what a cycle sees and does; ``run(model, policy)``
and ``to_json`` are the plain entry points.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from app.domain.config import GpuqConfig
from app.domain.from_config import ClusterModel, cluster_model
from app.domain.percentiles import percentile
from app.domain.runtime_history import RuntimeHistory
from app.domain.spec import JobSpec
from app.domain.spec_to_request import request_from_spec
from app.scheduling.descheduler import deschedule
from app.scheduling.filters import allowed_types
from app.scheduling.model import (
    CycleResult,
    FairState,
    JobRequest,
    LeaseInfo,
    Policy,
    PriorityInfo,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)
from app.scheduling.modes import replica_options
from app.simulate.all_policies import make_policy
from app.simulate.baselines.fifo import out_of_memory
from app.simulate.measures import gpus_held, measures

DEFAULT_RUNTIME_S = 3600.0
OOM_AFTER_S = 60.0  # a run on a card with too little memory fails this long after start
WAKE_S = 60.0  # while jobs wait, run a cycle at least this often (reservations, aging)


@dataclass
class ScenarioModel:
    """A scenario ready to replay: the static cluster and the jobs with their timing."""

    cluster: ClusterModel
    specs: list[JobSpec]

    @classmethod
    def from_config(cls, cfg: GpuqConfig) -> ScenarioModel:
        return cls(cluster_model(cfg), list(cfg.jobs))

    @classmethod
    def of_snapshot(cls, snap: Snapshot) -> ScenarioModel:
        """The cluster of a live snapshot, no scenario jobs: replays that start
        from "now" (estimated starts, the tuner's what-if) add the snapshot's."""
        cluster = ClusterModel(
            gpu_types=dict(snap.gpu_types),
            nodes=snap.nodes,
            pools=dict(snap.pools),
            teams=dict(snap.teams),
            priorities=dict(snap.priorities),
            scheduler=snap.config,
        )
        return cls(cluster, [])


@dataclass
class SimJob:
    """One job's life in the simulation."""

    index: int
    spec: JobSpec
    request: JobRequest
    submit_s: float
    runtime_s: float
    status: str = "waiting"  # waiting (not yet arrived), pending, running, succeeded, failed,
    # unschedulable
    start_s: float | None = None
    first_start_s: float | None = None
    end_s: float | None = None
    wait_s: float = 0.0
    queued_since: float = 0.0
    placements: tuple[ReplicaPlacement, ...] = ()
    preemptions: int = 0
    failures: int = 0
    ideal_runtime_s: float = 0.0  # run time on the fastest GPU type the request allows
    used_gpu_s: float = 0.0  # GPU-seconds of every run (cards x seconds)
    wasted_gpu_s: float = 0.0  # GPU-seconds of runs that did not finish (restarted)
    run_token: int = 0  # invalidates the finish event of a run that was preempted
    leases: tuple[LeaseInfo, ...] = ()
    reason: str = ""

    @property
    def team(self) -> str:
        return self.request.team


@dataclass
class SimulationResult:
    policy: str
    jobs: list[SimJob]
    events: list[dict[str, Any]] = field(default_factory=list)
    capacity_units: dict[str, float] = field(default_factory=dict)
    busy_unit_seconds: dict[str, float] = field(default_factory=dict)
    # when the last run of any job stopped (finished, failed, preempted or reclaimed)
    busy_until_s: float = 0.0
    cycles: int = 0
    descheduler_ticks: int = 0  # ticks at which the descheduler was asked to decide


def _pct(values: Sequence[float], q: int) -> float:
    """The shared percentile (app/domain/percentiles.py), 0 for no samples, rounded."""
    return round(percentile(values, q) or 0.0, 6)


def allocation_json(p: ReplicaPlacement) -> dict[str, Any]:
    return {
        "replica": p.replica,
        "node": p.node,
        "gpu_type": p.gpu_type,
        "gpus": list(p.devices),
        "mig": [{"device": d, "slice": i, "profile": prof} for d, i, prof in p.mig],
        "share": p.share,
        "units": round(p.units, 6),
    }


def to_json(result: SimulationResult) -> dict[str, Any]:
    """The "Simulation result" document (docs/evaluation.md#simulation-result)."""
    jobs = []
    waits, jcts = [], []
    by_team: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    first_submit = min((j.submit_s for j in result.jobs), default=0.0)
    last_end = max((j.end_s for j in result.jobs if j.end_s is not None), default=first_submit)
    for j in result.jobs:
        finished = j.status == "succeeded"
        jobs.append({
            "name": j.spec.name,
            "team": j.request.team,
            "pool": j.request.pool,
            "priority": j.request.priority,
            "submit_s": j.submit_s,
            "start_s": j.start_s,
            "first_start_s": j.first_start_s,
            "end_s": j.end_s,
            "wait_s": round(j.wait_s, 6),
            "status": j.status,
            "reason": j.reason or None,
            "allocations": [allocation_json(p) for p in j.placements],
            "units": round(sum(p.units for p in j.placements), 6),
            "preemptions": j.preemptions,
        })
        team = by_team[j.request.team]
        team["jobs"].append(1)
        # every job's wait, those that never started included (their wait runs to the
        # end of the run, or to the verdict for an unschedulable one): leaving them out
        # made a stuck queue look fast
        waits.append(j.wait_s)
        team["wait"].append(j.wait_s)
        if j.first_start_s is None:
            team["not_started"].append(1)
        if finished and j.end_s is not None:
            jcts.append(j.end_s - j.submit_s)
            team["jct"].append(j.end_s - j.submit_s)
            team["finished"].append(1)
    makespan = max(0.0, last_end - first_submit)
    # capacity over the span the CU-seconds were held in: a run stopped after the last
    # job ended (a job left pending) is counted, so is its time (over makespan_s alone,
    # utilization exceeded 1)
    span = max(makespan, result.busy_until_s - first_submit)
    util = {}
    for t, cap in result.capacity_units.items():
        denom = cap * span
        util[t] = round(result.busy_unit_seconds.get(t, 0.0) / denom, 6) if denom > 0 else 0.0
    summary: dict[str, Any] = {
        "jobs": len(result.jobs),
        "finished": sum(1 for j in result.jobs if j.status == "succeeded"),
        "failed": sum(1 for j in result.jobs if j.status == "failed"),
        "unschedulable": sum(1 for j in result.jobs if j.status == "unschedulable"),
        "not_started": sum(1 for j in result.jobs if j.first_start_s is None),
        "makespan_s": round(makespan, 6),
        "wait_p50_s": _pct(waits, 50),
        "wait_p99_s": _pct(waits, 99),
        "jct_p50_s": _pct(jcts, 50),
        "utilization": util,
        "by_team": {
            name: {
                "jobs": len(v["jobs"]),
                "finished": len(v["finished"]),
                "not_started": len(v["not_started"]),
                "wait_p50_s": _pct(v["wait"], 50),
                "wait_p99_s": _pct(v["wait"], 99),
                "jct_p50_s": _pct(v["jct"], 50),
            }
            for name, v in sorted(by_team.items())
        },
        "cycles": result.cycles,
        "descheduler_ticks": result.descheduler_ticks,
    }
    overall, per_team = measures(result.jobs)
    summary.update(overall)
    for name, extra in per_team.items():
        summary["by_team"][name].update(extra)
    return {"policy": result.policy, "jobs": jobs, "events": result.events, "summary": summary}


class Simulator:
    """Virtual-time replay; subclass or override the hooks for baselines."""

    max_failures = 3  # requeues after a failed run; the next failure ends the job failed

    def __init__(self, model: ScenarioModel, policy: Policy, policy_name: str = "gpuq",
                 seed: int = 42) -> None:
        self.model = model
        self.policy = policy
        self.policy_name = policy_name
        self.seed = seed
        self.now = 0.0
        self.heap: list[tuple[float, int, str, int, int]] = []
        self.seq = 0
        self.events: list[dict[str, Any]] = []
        self.jobs = self._make_jobs(model)
        self.pending: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.busy: dict[str, float] = defaultdict(float)
        self.busy_until = 0.0  # when the last run stopped
        self.cycles = 0
        self.lease_seq = 0
        self.static_cache: dict = {}  # the nodes never change during a replay
        self._dirty = False  # something arrived or ended since the last cycle
        self._lease_due = False  # a lease expired: cycle even with nothing pending
        self.fair: FairState | None = None  # the teams' deficits, cycle to cycle
        # run-time predictions from each team's finished jobs, as the dispatcher keeps
        # them (app/domain/runtime_history.py): every policy sees JobRequest.predicted_s
        self.history = RuntimeHistory()
        # the live service's descheduler loop, only next to the gpuq core it belongs to
        cfg = model.cluster.scheduler
        self.descheduler: Policy | None = (
            deschedule if policy_name == "gpuq" and cfg.descheduler
            and cfg.descheduler_interval_s > 0 else None
        )
        self.descheduler_ticks = 0
        self._next_tick: float | None = None  # kept off the heap: it must not stand in for
        # a wake-up, which runs the core cycle
        self._whole_node_sizes = {len(n.devices) for n in model.cluster.nodes
                                  if n.schedulable and n.devices}

    # -- setup ------------------------------------------------------------------
    def _make_jobs(self, model: ScenarioModel) -> list[SimJob]:
        c = model.cluster
        out = []
        for i, spec in enumerate(model.specs):
            team = c.teams.get(spec.team)
            pool_name = spec.pool or (team.pool if team else "default")
            prio_name = spec.priority or (team.default_priority if team else "P1")
            prio = c.priorities.get(prio_name) or PriorityInfo(prio_name, 500, True)
            pool = c.pools.get(pool_name)
            submit = spec.submit_at_s or 0.0
            req = request_from_spec(
                spec, job_id=f"{i}", pool=pool_name, priority=prio, submitted_at=submit,
                default_placement=pool.placement if pool else "binpack",
            )
            runtime = spec.runtime_s or spec.duration_estimate_s or DEFAULT_RUNTIME_S
            kinds = {d.gpu_type for d in replica_options(req, allowed_types(req, c.gpu_types,
                                                                            c.pools))}
            if req.mode == "gpu_units":
                kinds = {t.name for t in allowed_types(req, c.gpu_types, c.pools)}
            speeds = [spec.speed.get(t, 1.0) for t in kinds if t]
            ideal = runtime / max(speeds) if speeds else runtime
            out.append(SimJob(i, spec, req, submit, runtime, ideal_runtime_s=ideal))
        return out

    def push(self, t: float, kind: str, job: int = -1, token: int = 0) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (t, self.seq, kind, job, token))

    def event(self, kind: str, job: SimJob, **detail: Any) -> None:
        self.events.append(
            {"t": round(self.now, 6), "type": kind, "job": job.spec.name, **detail}
        )

    def _lease_detail(self, x: LeaseInfo) -> dict[str, Any]:
        return {"lease": x.id, "borrower": x.borrower, "lender": x.lender,
                "gpu_type": x.gpu_type, "units": x.units, "expires_at": round(x.expires_at, 6)}

    # -- hooks ------------------------------------------------------------------
    def run_time(self, job: SimJob, placements: Sequence[ReplicaPlacement]) -> tuple[float, str]:
        """Run time on these cards (the slowest type sets the pace) and the outcome."""
        if out_of_memory(job.request, tuple(placements), self.model.cluster.gpu_types):
            return OOM_AFTER_S, "fail"  # a baseline put it on too small a card (docs/evaluation.md)
        speeds = [job.spec.speed.get(p.gpu_type, 1.0) for p in placements if p.gpu_type]
        speed = min(speeds) if speeds else 1.0
        run = job.runtime_s / speed
        limit = job.spec.time_limit_s
        if limit is not None and run > limit:
            return limit, "time_limit"  # stopped there, as the dispatcher stops it
        return run, "finish"

    def on_fail(self, job: SimJob) -> None:
        """A run failed: requeue up to ``max_failures`` times, then give up (the run after
        the last requeue is the last: ``max_failures`` + 1 runs in all)."""
        job.failures += 1
        if job.failures > self.max_failures:
            job.status = "failed"
            job.end_s = self.now
        else:
            self._requeue(job)

    def wants_cycle(self, woke: bool) -> bool:
        """Run a core cycle at this instant? When something is queued (or a lease
        expired) and something changed or a wake-up came due."""
        return bool(self.pending or self._lease_due) and (woke or self._dirty)

    def finished(self) -> bool:
        """Stop before the next instant? A scenario replays until nothing is left."""
        return False

    def close_waits(self) -> None:
        """Jobs still queued at the end waited until now."""
        for j in self.pending.values():
            j.status = "pending"
            j.wait_s += self.now - j.queued_since
            j.queued_since = self.now

    # -- the loop -----------------------------------------------------------------
    def run(self) -> SimulationResult:
        for j in self.jobs:
            self.push(j.submit_s, "arrive", j.index)
        while self.heap or self._next_tick is not None:
            t = self.heap[0][0] if self.heap else math.inf
            tick = self._next_tick is not None and self._next_tick <= t
            if tick:
                t = self._next_tick  # type: ignore[assignment]
            self.now = t
            woke = False
            while self.heap and self.heap[0][0] <= t:
                _, _, kind, idx, token = heapq.heappop(self.heap)
                if kind == "arrive":
                    j = self.jobs[idx]
                    j.status = "pending"
                    j.queued_since = t
                    self.pending[idx] = j
                    self._dirty = True
                elif kind == "end":
                    j = self.jobs[idx]
                    if j.run_token == token and j.status == "running":
                        self._end_run(j, "finish")
                elif kind in ("fail", "time_limit"):
                    j = self.jobs[idx]
                    if j.run_token == token and j.status == "running":
                        self._end_run(j, kind)
                elif kind == "wake":
                    woke = True
                elif kind == "lease":  # a lease expires: a cycle decides on reclaim
                    woke = self._lease_due = True
            if self.wants_cycle(woke):
                self._core_cycle(t)
            if tick:
                self._next_tick = None
                if self.descheduler_tick() and self.pending:
                    self._core_cycle(t)  # victims look for room now, as the dispatcher would
            self._arm_tick()
            if self.finished():
                break
        self.close_waits()
        return SimulationResult(
            self.policy_name, self.jobs, self.events,
            capacity_units=self._capacity(), busy_unit_seconds=dict(self.busy),
            busy_until_s=self.busy_until,
            cycles=self.cycles, descheduler_ticks=self.descheduler_ticks,
        )

    def _core_cycle(self, t: float) -> None:
        self._lease_due = False
        self._dirty = False
        self.cycle()
        # time alone changes decisions (reservations, aging) only while work runs
        if self.pending and self.running and not (
            self.heap and self.heap[0][0] <= t + WAKE_S
        ):
            self.push(t + WAKE_S, "wake")

    # -- the descheduler ------------------------------------------------------------
    def _descheduler_has_work(self) -> bool:
        """Could a tick decide anything? It only makes room for pending P0 jobs and
        whole-node jobs, out of running work (a cheap superset of what it checks)."""
        if self.descheduler is None or not self.running:
            return False
        defrag = self.model.cluster.scheduler.defragment
        sizes = self._whole_node_sizes
        return any(
            not r.preemptible or (defrag and r.mode == "gpus" and r.gpus in sizes)
            for r in (j.request for j in self.pending.values())
        )

    def _arm_tick(self) -> None:
        """Schedule the next tick on the loop's grid (multiples of the interval)."""
        if self._next_tick is not None or not self._descheduler_has_work():
            return
        iv = self.model.cluster.scheduler.descheduler_interval_s
        k = math.floor(self.now / iv) + 1
        while k * iv <= self.now:  # rounding must not tick twice at one instant
            k += 1
        self._next_tick = k * iv

    def descheduler_tick(self) -> bool:
        """One pass of the descheduler loop; True if it evicted or moved anything."""
        if not self._descheduler_has_work():
            return False
        assert self.descheduler is not None
        self.descheduler_ticks += 1
        res = self.descheduler(self.snapshot())
        if not (res.preemptions or res.admissions):
            return False
        # like Dispatcher.run_with(decide): stops, binds, unschedulable; the queue's
        # reasons stay the dispatcher cycle's
        return self.apply(replace(res, reasons={}))

    def _capacity(self) -> dict[str, float]:
        c = self.model.cluster
        cap: dict[str, float] = defaultdict(float)
        for n in c.nodes:
            if n.gpu_type and n.gpu_type in c.gpu_types:
                cap[n.gpu_type] += c.gpu_types[n.gpu_type].weight * len(n.devices)
        return dict(cap)

    def _predict(self) -> None:
        """Pending jobs carry the prediction the history makes now (they keep it while
        they run: a running job's expected end)."""
        history = self.history
        for j in self.pending.values():
            p = history.predict(j.request)
            if p != j.request.predicted_s:
                j.request = replace(j.request, predicted_s=p)

    def snapshot(self) -> Snapshot:
        c = self.model.cluster
        self._predict()
        running = [
            RunningJob(j.request, j.placements, j.start_s or 0.0, j.leases)
            for j in self.running.values()
        ]
        return Snapshot(
            now=self.now, gpu_types=c.gpu_types, nodes=c.nodes, pools=c.pools, teams=c.teams,
            priorities=c.priorities, running=running,
            pending=[j.request for j in self.pending.values()], config=c.scheduler,
            static_cache=self.static_cache, fair=self.fair,
        )

    def cycle(self) -> bool:
        """One scheduling cycle; True if anything changed."""
        self.cycles += 1
        res = self.policy(self.snapshot())
        if res.fair is not None:
            self.fair = res.fair
        return self.apply(res)

    def apply(self, res: CycleResult) -> bool:
        """Apply a decision as the dispatcher persists it: preemptions first (a moved
        job is requeued), then admissions, then verdicts; True if anything changed."""
        changed = False
        by_id = {j.request.id: j for j in [*self.pending.values(), *self.running.values()]}
        for ret in res.returned:  # a lease now on the pool's own guarantee: it just ends
            j = by_id.get(ret.job_id)
            if j is None or j.status != "running":
                continue
            for x in [x for x in j.leases if x.id == ret.lease_id]:
                self.event("lease_end", j, **self._lease_detail(x), state="returned",
                           reason=ret.reason)
            j.leases = tuple(x for x in j.leases if x.id != ret.lease_id)
            changed = True
        for pre in res.preemptions:
            j = by_id.get(pre.job_id)
            if j is None or j.status != "running":
                continue
            attempt = self.now - (j.start_s if j.start_s is not None else self.now)
            self._stop_run(j, finished=False)
            j.preemptions += 1
            by = by_id.get(pre.by_job or "")
            # the forward replay's jobs (app/simulate/estimate.py) have no scenario spec
            by_name = by.spec.name if by is not None and by.spec is not None else None
            self.event("reclaim" if pre.kind == "reclaim" else "preempt", j,
                       by=by_name, reason=pre.reason)
            self._requeue(j)
            j.reason = pre.reason  # as the dispatcher writes it, until a cycle says more
            j.request = replace(
                j.request, last_preempted_at=self.now, last_preempted_by=pre.by_job,
                last_reclaimed_at=self.now if pre.kind == "reclaim" else
                j.request.last_reclaimed_at,
                longest_attempt_s=max(j.request.longest_attempt_s or 0.0, attempt),
            )
            # the thrash guard is time-based: look again when it lapses
            self.push(self.now + self.model.cluster.scheduler.thrash_window_s, "wake")
            changed = True
        for adm in res.admissions:
            j = by_id.get(adm.job_id)
            if j is None or j.status != "pending":
                continue
            self._start(j, adm.placements, adm.leases)
            changed = True
        for job_id, why in res.unschedulable.items():
            j = by_id.get(job_id)
            if j is not None and j.status == "pending":
                j.status = "unschedulable"
                j.reason = why
                # the time it queued before the verdict was a wait (it was left out)
                j.wait_s += self.now - j.queued_since
                j.queued_since = self.now
                del self.pending[j.index]
                changed = True
        for job_id, why in res.reasons.items():
            j = by_id.get(job_id)
            if j is not None:
                j.reason = why
        return changed

    def _start(self, j: SimJob, placements, leases) -> None:
        del self.pending[j.index]
        self.running[j.index] = j
        j.status = "running"
        j.wait_s += self.now - j.queued_since
        j.start_s = self.now
        if j.first_start_s is None:
            j.first_start_s = self.now
        j.placements = tuple(placements)
        j.run_token += 1
        j.reason = ""
        infos = []
        for g in leases:
            self.lease_seq += 1
            infos.append(LeaseInfo(f"lease-{self.lease_seq}", g.borrower, g.lender, g.gpu_type,
                                   g.units, j.request.id, self.now, g.expires_at))
        j.leases = tuple(infos)
        self.event("admit", j)
        for x in infos:
            self.event("lease_start", j, **self._lease_detail(x))
            self.push(x.expires_at, "lease")
        duration, outcome = self.run_time(j, j.placements)
        self.push(self.now + duration, "end" if outcome == "finish" else outcome, j.index,
                  j.run_token)

    def _stop_run(self, j: SimJob, finished: bool) -> None:
        """Free the job's capacity and account what it used (and threw away, if the run
        did not finish: a restarted run starts over)."""
        del self.running[j.index]
        elapsed = self.now - (j.start_s if j.start_s is not None else self.now)
        self.busy_until = max(self.busy_until, self.now)
        types = self.model.cluster.gpu_types
        for p in j.placements:
            if p.gpu_type:
                self.busy[p.gpu_type] += p.units * elapsed
                gpu_s = gpus_held(p, types) * elapsed
                j.used_gpu_s += gpu_s
                if not finished:
                    j.wasted_gpu_s += gpu_s
        for x in j.leases:
            self.event("lease_end", j, **self._lease_detail(x))
        j.leases = ()
        j.run_token += 1

    def _end_run(self, j: SimJob, outcome: str) -> None:
        self._stop_run(j, finished=outcome == "finish")
        self._dirty = True
        # freed guarantee may take a borrower's lease over (the cycle's step 1b),
        # as the live dispatcher's next pass would, queue or not
        if any(r.leases for r in self.running.values()):
            self._lease_due = True
        if outcome == "finish":
            j.status = "succeeded"
            j.end_s = self.now
            self.history.record(j.request, self.now - (j.start_s or self.now))
            self.event("finish", j)
        elif outcome == "time_limit":  # not retried: the next run would meet it again
            j.status = "failed"
            j.end_s = self.now
            j.reason = f"time limit: stopped after running {j.spec.time_limit_s:g} s"
            self.event("fail", j, reason="time_limit")
        else:
            self.event("fail", j)
            self.on_fail(j)

    def _requeue(self, j: SimJob) -> None:
        """Back to pending with its original submit time (wait keeps counting)."""
        j.status = "pending"
        j.queued_since = self.now
        j.request = _with_preemptions(j.request, j.preemptions)
        self.pending[j.index] = j


def _with_preemptions(r: JobRequest, n: int) -> JobRequest:
    return replace(r, preemption_count=n)


def run(model: ScenarioModel, policy: str = "gpuq", seed: int = 42) -> SimulationResult:
    """Replay ``model`` through the policy named ``policy``."""
    return Simulator(model, make_policy(policy), policy, seed).run()

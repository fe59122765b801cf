"""Estimated start times (Slurm's ``squeue --start``): replay the live snapshot forward.

The same :class:`~app.simulate.replay.Simulator` that replays scenarios runs
from "now": running jobs end at their start plus their duration estimate
(a per-pool default when they have none; never sooner than a minimum, since
a job past its estimate is still running), pending jobs wait with their real
submit times, and the core decides cycle after cycle exactly as the
dispatcher would. A pending job's estimated start is the virtual time it is
admitted. Nothing new arrives in the replay, so later submissions of higher
priority make a real start later than estimated.

Three simplifications keep the cost to a few dozen core cycles: no 60 s
wake-ups between ends (aging and reservations are seen at the next end), no
descheduler passes (its moves change where jobs run more than when), and job
ends close together are decided in ONE cycle: a cycle due at ``t`` waits for
the events that follow within ``max(batch_min_s, batch_share x (t - now))``
(a minute near "now", a quarter of the lead time further out) and runs at the
last of them. A job that cycle admits is given the batch's FIRST event as its
start: the earliest time consistent with the batch (exact when an end is alone
in its window), and users' duration estimates are mostly too long, so real ends
come early. A backlog of 10,000 jobs behind 192 running ones took 200 cycles
(one per end) and reached 357 of its first 500 jobs; it now takes 14 cycles
and reaches all 500 (docs/benchmarks.md).

The cost is bounded: only the first ``max_jobs`` jobs of the dispatch order
(the core's own ``CycleResult.order`` from the first cycle) are replayed past
that first cycle, for at most ``max_cycles`` core cycles and ``horizon_s`` of
virtual time; jobs beyond those bounds get no estimate (``None``), which says
"not within the bounds", not "never".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.scheduling.model import CycleResult, Policy, ReplicaPlacement, Snapshot
from app.simulate.replay import DEFAULT_RUNTIME_S, ScenarioModel, SimJob, Simulator

MIN_REMAINING_S = 60.0  # a job past its estimate is assumed to end within a minute
HORIZON_S = 7 * 86400.0
MAX_CYCLES = 50
MAX_JOBS = 500
BATCH_MIN_S = 60.0  # ends within a minute of each other are decided together...
BATCH_SHARE = 0.25  # ...and within a quarter of the lead time further out


@dataclass(frozen=True)
class StartEstimates:
    """Estimated start (epoch seconds) of each pending job that starts within the bounds."""

    computed_at: float
    starts: dict[str, float]
    cycles: int
    horizon_reached: bool

    def get(self, job_id: str) -> float | None:
        return self.starts.get(job_id)


class ForwardReplay(Simulator):
    """A :class:`Simulator` whose jobs are the snapshot's, run only to estimate starts."""

    def __init__(
        self,
        snap: Snapshot,
        policy: Policy,
        *,
        default_runtime_s: Mapping[str, float],
        horizon_s: float,
        max_cycles: int,
        max_jobs: int = MAX_JOBS,
        batch_min_s: float = BATCH_MIN_S,
        batch_share: float = BATCH_SHARE,
        sim_speed: float = 1.0,
    ) -> None:
        super().__init__(ScenarioModel.of_snapshot(snap), policy, "gpuq")
        self.descheduler = None  # its moves change where, rarely when: not worth the passes
        self.now = snap.now
        self.deadline = snap.now + horizon_s
        self.max_cycles = max_cycles
        self.horizon_reached = False
        self._done = False
        self.max_jobs = max_jobs
        self._trimmed = False
        self.start = snap.now
        self.batch_min_s = batch_min_s
        self.batch_share = batch_share
        self._batch_from: float | None = None  # the first deferred cycle's time
        self.estimated: dict[int, float] = {}  # job index -> estimated start

        def runtime(req) -> float:
            # a simulated cluster runs a job for its estimate / GPUQ_SIM_SPEED; the pool's
            # default is measured, so already in the cluster's seconds
            if req.duration_estimate_s:
                return req.duration_estimate_s / sim_speed
            return default_runtime_s.get(req.pool, DEFAULT_RUNTIME_S)

        jobs: list[SimJob] = []
        for r in snap.running:
            j = SimJob(len(jobs), None, r.request, r.request.submitted_at, runtime(r.request))  # type: ignore[arg-type]
            j.status, j.start_s = "running", r.started_at
            j.placements, j.leases = r.placements, r.leases
            remaining = max(r.started_at + j.runtime_s - snap.now, MIN_REMAINING_S / sim_speed)
            self.running[j.index] = j
            self.push(snap.now + remaining, "end", j.index, j.run_token)
            for x in r.leases:
                self.push(max(x.expires_at, snap.now), "lease")
            jobs.append(j)
        self.waiting: set[int] = set()
        for req in snap.pending:
            j = SimJob(len(jobs), None, req, req.submitted_at, runtime(req))  # type: ignore[arg-type]
            j.status, j.queued_since = "pending", snap.now
            self.pending[j.index] = j
            self.waiting.add(j.index)
            jobs.append(j)
        self.jobs = jobs
        self._dirty = True
        self.push(snap.now, "wake")  # the first cycle runs at "now"

    # -- hooks: no event log, run time is the estimate, stop at the bounds ---------
    def push(self, t: float, kind: str, job: int = -1, token: int = 0) -> None:
        if kind != "arrive":  # every job is already here (run() would re-arrive them)
            super().push(t, kind, job, token)

    def event(self, kind: str, job: SimJob, **detail: Any) -> None:
        return None

    def run_time(self, job: SimJob, placements: Sequence[ReplicaPlacement]) -> tuple[float, str]:
        return job.runtime_s, "finish"

    def apply(self, res: CycleResult) -> bool:
        """After the first cycle, only the head of the queue is replayed further: a cycle
        costs in proportion to the pending jobs, and the tail's estimates would be hours
        out and beyond the cycle bound anyway."""
        changed = super().apply(res)
        if not self._trimmed and res.order:
            self._trimmed = True
            keep = set(res.order[: self.max_jobs])
            for idx in [i for i, j in self.pending.items() if j.request.id not in keep]:
                del self.pending[idx]
                self.waiting.discard(idx)
        return changed

    def _over_budget(self) -> bool:
        """At most ``max_cycles`` core cycles; past the horizon nothing runs."""
        if self.cycles >= self.max_cycles or self.now > self.deadline:
            self.horizon_reached = True
        return self.horizon_reached

    def _stop(self) -> None:
        self.heap.clear()
        self._next_tick = None

    def cycle(self) -> bool:
        if self._over_budget():
            self._stop()
            return False
        changed = super().cycle()
        self.waiting = {i for i in self.waiting if self.jobs[i].first_start_s is None}
        if not self.waiting:  # every job of interest has a start: done
            self.horizon_reached = False
            self._done = True
            self._stop()
        return changed

    def _core_cycle(self, t: float) -> None:
        """A cycle without the simulator's 60 s wake-ups: between two job ends only time
        changes (aging, reservations), which the next end's cycle sees too. And a cycle
        waits while more events follow within the batch window (module docstring): the
        loop calls again at the next event, the job ends in between already applied. The
        first cycle (the present) is never deferred."""
        if self._batch_from is None:
            self._batch_from = t
        window = max(self.batch_min_s, self.batch_share * (self._batch_from - self.start))
        if self.cycles and self.heap and self.heap[0][0] <= self._batch_from + window:
            return  # still dirty: the next event's turn of the loop cycles
        first = self._batch_from
        self._batch_from = None
        self._lease_due = False
        self._dirty = False
        before = set(self.waiting)
        self.cycle()
        for i in before - self.waiting:  # started in this cycle: at the batch's first event
            if self.jobs[i].first_start_s is not None:  # (not: trimmed off the queue's tail)
                self.estimated[i] = first


def estimate_starts(
    snap: Snapshot,
    policy: Policy,
    *,
    default_runtime_s: Mapping[str, float] | None = None,
    horizon_s: float = HORIZON_S,
    max_cycles: int = MAX_CYCLES,
    max_jobs: int = MAX_JOBS,
    batch_min_s: float = BATCH_MIN_S,
    batch_share: float = BATCH_SHARE,
    sim_speed: float = 1.0,
) -> StartEstimates:
    """Replay ``snap`` forward through ``policy``; see the module docstring
    (``batch_min_s=0, batch_share=0``: one cycle per event, as before the batching;
    ``sim_speed``: the simulated cluster's GPUQ_SIM_SPEED, by which it divides run times)."""
    sim = ForwardReplay(
        replace(snap, static_cache={}),
        policy,
        default_runtime_s=default_runtime_s or {},
        horizon_s=horizon_s,
        max_cycles=max_cycles,
        max_jobs=max_jobs,
        batch_min_s=batch_min_s,
        batch_share=batch_share,
        sim_speed=sim_speed,
    )
    sim.run()
    starts = {sim.jobs[i].request.id: t for i, t in sim.estimated.items()}
    return StartEstimates(snap.now, starts, sim.cycles, sim.horizon_reached)

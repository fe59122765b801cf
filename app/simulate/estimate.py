"""Estimated start times (Slurm's ``squeue --start``): replay the live snapshot forward.

The same :class:`~app.simulate.replay.Simulator` that replays scenarios runs
from "now": running jobs end at their start plus their duration estimate
(a per-pool default when they have none; never sooner than a minimum, since
a job past its estimate is still running), pending jobs wait with their real
submit times, and the core decides cycle after cycle exactly as the
dispatcher would. A pending job's estimated start is the virtual time it is
admitted. Nothing new arrives in the replay, so later submissions of higher
priority make a real start later than estimated.

Two simplifications keep the cost at one core cycle per job end: no 60 s
wake-ups between ends (aging and reservations are seen at the next end) and
no descheduler passes (its moves change where jobs run more than when).

The cost is bounded: only the first ``max_jobs`` jobs of the dispatch order
(the core's own ``CycleResult.order`` from the first cycle) are replayed past
that first cycle, for at most ``max_cycles`` core cycles and ``horizon_s`` of
virtual time; jobs beyond those bounds get no estimate (``None``), which says
"not within the bounds", not "never".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from app.domain.from_config import ClusterModel
from app.scheduling.model import CycleResult, ReplicaPlacement, Snapshot
from app.scheduling.policies import Policy
from app.simulate.replay import DEFAULT_RUNTIME_S, ScenarioModel, SimJob, Simulator

MIN_REMAINING_S = 60.0  # a job past its estimate is assumed to end within a minute
HORIZON_S = 7 * 86400.0
MAX_CYCLES = 200
MAX_JOBS = 500


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
    ) -> None:
        cluster = ClusterModel(
            gpu_types=dict(snap.gpu_types),
            nodes=snap.nodes,
            pools=dict(snap.pools),
            teams=dict(snap.teams),
            priorities=dict(snap.priorities),
            scheduler=snap.config,
        )
        super().__init__(ScenarioModel(cluster, []), policy, "gpuq")
        self.descheduler = None  # its moves change where, rarely when: not worth the passes
        self.now = snap.now
        self.deadline = snap.now + horizon_s
        self.max_cycles = max_cycles
        self.horizon_reached = False
        self._done = False
        self.max_jobs = max_jobs
        self._trimmed = False

        def runtime(req) -> float:
            return req.duration_estimate_s or default_runtime_s.get(req.pool, DEFAULT_RUNTIME_S)

        jobs: list[SimJob] = []
        for r in snap.running:
            j = SimJob(len(jobs), None, r.request, r.request.submitted_at, runtime(r.request))  # type: ignore[arg-type]
            j.status, j.start_s = "running", r.started_at
            j.placements, j.leases = r.placements, r.leases
            remaining = max(r.started_at + j.runtime_s - snap.now, MIN_REMAINING_S)
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

    def run_time(self, job: SimJob, placements: tuple[ReplicaPlacement, ...]) -> tuple[float, str]:
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
        changes (aging, reservations), which the next end's cycle sees too; this keeps the
        cost at one cycle per job end."""
        self._lease_due = False
        self._dirty = False
        self.cycle()


def estimate_starts(
    snap: Snapshot,
    policy: Policy,
    *,
    default_runtime_s: Mapping[str, float] | None = None,
    horizon_s: float = HORIZON_S,
    max_cycles: int = MAX_CYCLES,
    max_jobs: int = MAX_JOBS,
) -> StartEstimates:
    """Replay ``snap`` forward through ``policy``; see the module docstring."""
    sim = ForwardReplay(
        replace(snap, static_cache={}),
        policy,
        default_runtime_s=default_runtime_s or {},
        horizon_s=horizon_s,
        max_cycles=max_cycles,
        max_jobs=max_jobs,
    )
    sim.run()
    starts = {
        j.request.id: j.first_start_s
        for j in sim.jobs[len(snap.running) :]
        if j.first_start_s is not None
    }
    return StartEstimates(snap.now, starts, sim.cycles, sim.horizon_reached)

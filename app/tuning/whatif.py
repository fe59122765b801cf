"""The tuner's what-if: run the pure core forward in virtual time under a weight set.

"Replay the recent window" is read forward-looking: start from the
cluster as it is now (running jobs keep their placements until their
expected end, pending jobs wait), and let the jobs that arrived in the
last window arrive again with the same spacing, as the forecast of the
next window. The same input is run with the old and with the new GPU
type weights; only the weights differ, so the difference in predicted
waits is the effect of the change.

It runs on the simulator's one event loop (:class:`app.simulate.replay.Simulator`,
the engine of ``gpuq simulate`` and of the estimated starts) with the
what-if's own rules as hooks (:class:`WhatIf`): a core cycle at every
event while jobs wait, bounded by ``max_cycles`` and the horizon; a
preempted job simply waits again (no restart accounting, no thrash
wake-up); lease grants, verdicts and reasons are not acted on; jobs still
waiting at the end count with their wait up to the horizon (censored). No
clock, no I/O, deterministic; the policy is any ``schedule(snapshot)``
callable, so tests can pass their own.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from app.domain.percentiles import percentile
from app.scheduling.model import (
    CycleResult,
    JobRequest,
    Policy,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
)
from app.simulate.replay import DEFAULT_RUNTIME_S, ScenarioModel, SimJob, Simulator
from app.tuning.tuner import ReplayOutcome

__all__ = ["DEFAULT_RUNTIME_S", "Arrival", "WhatIf", "make_replay", "simulate_forward",
           "with_weights"]


@dataclass(frozen=True, slots=True)
class Arrival:
    """A job to submit ``offset_s`` after the replay starts, running ``runtime_s`` once placed."""

    offset_s: float
    request: JobRequest
    runtime_s: float


def with_weights(snap: Snapshot, weights: Mapping[str, float]) -> Snapshot:
    """The snapshot re-priced: GPU types carry the new weights, running CU scaled to match."""
    types = {
        name: replace(t, weight=float(weights.get(name, t.weight)))
        for name, t in snap.gpu_types.items()
    }
    factor = {
        name: (types[name].weight / t.weight) if t.weight else 1.0
        for name, t in snap.gpu_types.items()
    }
    running = [
        replace(
            job,
            placements=tuple(
                replace(p, units=p.units * factor.get(p.gpu_type or "", 1.0))
                for p in job.placements
            ),
        )
        for job in snap.running
    ]
    return replace(snap, gpu_types=types, running=running, pending=list(snap.pending))


class WhatIf(Simulator):
    """The replay engine started from ``snap``, with the what-if's rules (module docstring).

    ``remaining_s``: per running job id, seconds until it ends (default: its
    duration estimate minus the time it has run, at least 60 s).
    ``runtimes_s``: per pending job id, its run time once placed.
    """

    def __init__(
        self,
        snap: Snapshot,
        arrivals: Sequence[Arrival],
        policy: Policy,
        *,
        remaining_s: Mapping[str, float] | None = None,
        runtimes_s: Mapping[str, float] | None = None,
        horizon_s: float = 6 * 3600.0,
        max_cycles: int = 400,
    ) -> None:
        super().__init__(ScenarioModel.of_snapshot(snap), policy, "what-if")
        self.descheduler = None  # the dispatcher's cycles only
        self.base = snap
        t0 = self.now = snap.now
        self.end_t = t0 + horizon_s
        self.max_cycles = max_cycles
        runtimes = dict(runtimes_s or {})
        for a in arrivals:
            runtimes[a.request.id] = a.runtime_s
        remaining_s = remaining_s or {}

        def runtime(req: JobRequest) -> float:
            return runtimes.get(req.id) or req.duration_estimate_s or DEFAULT_RUNTIME_S

        jobs: list[SimJob] = []
        for r in snap.running:
            j = SimJob(len(jobs), None, r.request, r.request.submitted_at, runtime(r.request))  # type: ignore[arg-type]
            j.status, j.start_s, j.placements, j.leases = (
                "running", r.started_at, r.placements, r.leases
            )
            left = remaining_s.get(r.request.id)
            if left is None:
                est = r.request.duration_estimate_s or DEFAULT_RUNTIME_S
                left = max(60.0, est - (t0 - r.started_at))
            self.running[j.index] = j
            self.push(max(t0, t0 + left), "end", j.index, j.run_token)
            jobs.append(j)
        self.counted: set[int] = set()  # jobs whose wait is predicted: every job that queues
        for req in snap.pending:
            j = SimJob(len(jobs), None, req, req.submitted_at, runtime(req))  # type: ignore[arg-type]
            j.status, j.queued_since = "pending", t0
            self.pending[j.index] = j
            self.counted.add(j.index)
            jobs.append(j)
        for a in arrivals:  # "waiting": run() pushes their arrival
            at = t0 + max(0.0, a.offset_s)
            j = SimJob(len(jobs), None, replace(a.request, submitted_at=at), at, runtime(a.request))  # type: ignore[arg-type]
            self.counted.add(j.index)
            jobs.append(j)
        self.jobs = jobs
        self.push(t0, "wake")  # the first cycle runs at "now"

    # -- hooks ------------------------------------------------------------------
    def push(self, t: float, kind: str, job: int = -1, token: int = 0) -> None:
        if kind != "arrive" or self.jobs[job].status == "waiting":  # only the window's jobs arrive
            super().push(t, kind, job, token)

    def event(self, kind: str, job: SimJob, **detail: object) -> None:
        return None  # no event log

    def run_time(self, job: SimJob, placements: Sequence[ReplicaPlacement]) -> tuple[float, str]:
        return job.runtime_s, "finish"

    def wants_cycle(self, woke: bool) -> bool:
        return bool(self.pending) and self.cycles < self.max_cycles

    def _core_cycle(self, t: float) -> None:
        self.cycle()  # no 60 s wake-ups: a cycle runs at every event anyway

    def finished(self) -> bool:
        return not self.heap or self.cycles >= self.max_cycles or self.heap[0][0] > self.end_t

    def close_waits(self) -> None:
        for j in self.pending.values():  # still waiting: censored at the horizon
            j.wait_s += max(0.0, self.end_t - j.queued_since)

    def snapshot(self) -> Snapshot:
        return replace(
            self.base,
            now=self.now,
            running=[
                RunningJob(j.request, j.placements, j.start_s or 0.0, j.leases)
                for j in self.running.values()
            ],
            pending=[j.request for j in self.pending.values()],
        )

    def apply(self, res: CycleResult) -> bool:
        """Preemptions, then admissions; a victim waits again as it was."""
        by_id = {j.request.id: j for j in [*self.pending.values(), *self.running.values()]}
        for pre in res.preemptions:
            j = by_id.get(pre.job_id)
            if j is None or j.status != "running":
                continue
            del self.running[j.index]
            j.run_token += 1  # its end event is stale now
            j.status, j.queued_since = "pending", self.now
            self.pending[j.index] = j
            self.counted.add(j.index)
        for adm in res.admissions:
            j = by_id.get(adm.job_id)
            if j is not None and j.status == "pending":
                self._start(j, adm.placements, ())
        return bool(res.preemptions or res.admissions)

    def outcome(self) -> ReplayOutcome:
        """Predicted waits of every job that queued during the replay (the window's
        jobs that had not arrived by the end are not predicted)."""
        waits: dict[str, tuple[str, float]] = {}
        for j in self.jobs:
            if j.index in self.counted and j.status != "waiting":
                waits[j.request.id] = (j.request.team, j.wait_s)
        by_team: dict[str, list[float]] = defaultdict(list)
        for team, w in waits.values():
            by_team[team].append(w)
        return ReplayOutcome(
            wait_p99_s=percentile((w for _, w in waits.values()), 99),
            team_p99_s={t: percentile(ws, 99) or 0.0 for t, ws in sorted(by_team.items())},
            jobs=len(waits),
        )


def simulate_forward(
    snap: Snapshot, arrivals: Sequence[Arrival], *, policy: Policy, **bounds: Any
) -> ReplayOutcome:
    """Predicted waits of the pending and arriving jobs; ``bounds`` are :class:`WhatIf`'s
    keyword arguments (``remaining_s``, ``runtimes_s``, ``horizon_s``, ``max_cycles``)."""
    sim = WhatIf(snap, arrivals, policy, **bounds)
    sim.run()
    return sim.outcome()


def make_replay(
    snap: Snapshot, arrivals: Sequence[Arrival], *, policy: Policy, **kw: object
) -> Callable[[Mapping[str, float]], ReplayOutcome]:
    """The tuner's ``replay(weights)`` closure over one observed state."""

    def replay(weights: Mapping[str, float]) -> ReplayOutcome:
        return simulate_forward(with_weights(snap, weights), arrivals, policy=policy, **kw)

    return replay

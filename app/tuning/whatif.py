"""The tuner's what-if: run the pure core forward in virtual time under a weight set.

"Replay the recent window" is read forward-looking: start from the
cluster as it is now (running jobs keep their placements until their
expected end, pending jobs wait), and let the jobs that arrived in the
last window arrive again with the same spacing, as the forecast of the
next window. The same input is run with the old and with the new GPU
type weights; only the weights differ, so the difference in predicted
waits is the effect of the change.

It is a small discrete-event loop over the same ``schedule(snapshot)``
the dispatcher calls (a policy callable, so tests can pass any), bounded
by ``max_cycles``. No clock, no I/O, deterministic. (``app/simulate``
replays a scenario from an empty cluster; the tuner needs the live state
with its running placements as the starting point, hence this loop.)
"""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from app.domain.percentiles import percentile
from app.scheduling.model import CycleResult, JobRequest, RunningJob, Snapshot
from app.tuning.tuner import ReplayOutcome

Policy = Callable[[Snapshot], CycleResult]
DEFAULT_RUNTIME_S = 3600.0


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


def simulate_forward(
    snap: Snapshot,
    arrivals: Sequence[Arrival],
    *,
    policy: Policy,
    remaining_s: Mapping[str, float] | None = None,
    runtimes_s: Mapping[str, float] | None = None,
    horizon_s: float = 6 * 3600.0,
    max_cycles: int = 400,
) -> ReplayOutcome:
    """Predicted waits of the pending and arriving jobs.

    ``remaining_s``: per running job id, seconds until it ends (default: its
    duration estimate minus the time it has run, at least 60 s).
    ``runtimes_s``: per pending job id, its run time once placed.
    Jobs still waiting at the end count with their wait so far (censored).
    """
    t0 = snap.now
    end_t = t0 + horizon_s
    remaining_s = remaining_s or {}
    runtimes_s = dict(runtimes_s or {})
    running: dict[str, RunningJob] = {}
    epoch: dict[str, int] = {}  # bumped at every admission: older finish events are stale
    events: list[tuple[float, int, str, str, int]] = []  # (time, seq, kind, job id, epoch)
    seq = 0

    def push(t: float, kind: str, job_id: str, n: int = 0) -> None:
        nonlocal seq
        seq += 1
        heapq.heappush(events, (t, seq, kind, job_id, n))

    for job in snap.running:
        running[job.request.id] = job
        epoch[job.request.id] = 0
        left = remaining_s.get(job.request.id)
        if left is None:
            est = job.request.duration_estimate_s or DEFAULT_RUNTIME_S
            left = max(60.0, est - (t0 - job.started_at))
        push(t0 + left, "finish", job.request.id)
    pending: dict[str, JobRequest] = {j.id: j for j in snap.pending}
    future: dict[str, Arrival] = {}
    for a in arrivals:
        future[a.request.id] = a
        runtimes_s[a.request.id] = a.runtime_s
        push(t0 + max(0.0, a.offset_s), "arrive", a.request.id)
    waited: dict[str, float] = defaultdict(float)
    queued_since: dict[str, float] = {j.id: t0 for j in snap.pending}
    team_of: dict[str, str] = {j.id: j.team for j in snap.pending}
    for a in arrivals:
        team_of[a.request.id] = a.request.team

    now = t0
    cycles = 0
    while True:
        while events and events[0][0] <= now:
            _, _, kind, job_id, n = heapq.heappop(events)
            if kind == "arrive":
                pending[job_id] = replace(future.pop(job_id).request, submitted_at=now)
                queued_since[job_id] = now
            elif job_id in running and epoch.get(job_id) == n:
                running.pop(job_id)
        if pending and cycles < max_cycles:
            cycles += 1
            cur = replace(
                snap, now=now, running=list(running.values()), pending=list(pending.values())
            )
            result = policy(cur)
            for pre in result.preemptions:
                victim = running.pop(pre.job_id, None)
                if victim is not None:
                    pending[pre.job_id] = victim.request
                    queued_since[pre.job_id] = now
                    team_of.setdefault(pre.job_id, victim.request.team)
            for adm in result.admissions:
                req = pending.pop(adm.job_id, None)
                if req is None:
                    continue
                waited[adm.job_id] += now - queued_since.pop(adm.job_id, now)
                running[adm.job_id] = RunningJob(req, adm.placements, now)
                n = epoch[adm.job_id] = epoch.get(adm.job_id, 0) + 1
                run = runtimes_s.get(adm.job_id) or req.duration_estimate_s or DEFAULT_RUNTIME_S
                push(now + run, "finish", adm.job_id, n)
        if not events or cycles >= max_cycles or events[0][0] > end_t:
            break
        now = events[0][0]
    for job_id, since in queued_since.items():
        waited[job_id] += max(0.0, end_t - since)  # still waiting: censored at the horizon
    waits = {j: w for j, w in waited.items() if j in team_of}
    by_team: dict[str, list[float]] = defaultdict(list)
    for j, w in waits.items():
        by_team[team_of[j]].append(w)
    return ReplayOutcome(
        wait_p99_s=percentile(waits.values(), 99),
        team_p99_s={t: percentile(ws, 99) or 0.0 for t, ws in sorted(by_team.items())},
        jobs=len(waits),
    )


def make_replay(
    snap: Snapshot, arrivals: Sequence[Arrival], *, policy: Policy, **kw: object
) -> Callable[[Mapping[str, float]], ReplayOutcome]:
    """The tuner's ``replay(weights)`` closure over one observed state."""

    def replay(weights: Mapping[str, float]) -> ReplayOutcome:
        return simulate_forward(with_weights(snap, weights), arrivals, policy=policy, **kw)

    return replay

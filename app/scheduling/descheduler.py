"""Descheduler decisions (pure): room for P0, and defragmentation.

The dispatcher's cycle already preempts for a job that does not fit; the
descheduler (every ``descheduler_interval_s``) looks at the cluster as a
whole, the way a descheduler loop checks node water levels:

1. **P0 room** -- for every pending non-preemptible (P0) job, in submit
   order, that cannot start now: evict the cheapest minimal set of lower
   tiers that blocks it (P2 before P1, same rules as the cycle's
   preemption) and admit it in their place.
2. **Defragment** -- a pending job that needs a whole node (its per-replica
   GPU count is a node's full card count) but finds every such node
   partly taken by small preemptible jobs: pick the node whose small jobs
   lose the least work, and move them -- but only when *every* moved job
   can be placed elsewhere at once (and its pool can pay for it there);
   otherwise nothing moves. The big job is admitted onto the freed node in
   the same decision, so the room cannot be taken by someone else first.
   A moved job restarts from scratch, so the jobs one move stops may throw
   away at most ``fair_preemption_max_lost_gpu_h`` GPU-hours in all (cards x
   time run), the budget of a fair-share preemption: a node of jobs that just
   started is moved, a node of long runs is left to finish (unbounded moves
   restarted day-long runs on slower cards: docs/evaluation.md). A move stops running
   jobs, so like any same-priority preemption it only restores entitlement: it is made
   only for a job whose team is owed it (``Cycle.owed``: within its entitlement with the
   job, or short of it long enough); a team above its entitlement waits for a node to
   free, or for its reservation (moves for such teams restarted one-card jobs on
   slower cards: docs/evaluation.md).

The output is an ordinary :class:`CycleResult` (preemptions, then
admissions -- a moved job is preempted and admitted at its new place), so
the loop persists it through the same path as the dispatcher.
"""

from __future__ import annotations

from app.scheduling.books import holding
from app.scheduling.engine import Cycle
from app.scheduling.filters import allowed_types
from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    Preemption,
    RunningJob,
    Snapshot,
    gpus_held,
)
from app.scheduling.modes import mode_of
from app.scheduling.preemption import lost_work
from app.scheduling.state import EPS
from app.scheduling.verdicts import Reason, ReasonCode


def plan(cycle: Cycle) -> CycleResult:
    """Run both passes on a built engine cycle (``Cycle(snap).build()``)."""
    p0_room(cycle)
    if cycle.snap.config.defragment:
        defragment(cycle)
    return cycle.result


def deschedule(snap: Snapshot) -> CycleResult:
    """The descheduler loop's decision for one snapshot (nothing when switched off)."""
    if not snap.config.descheduler:
        return CycleResult()
    c = Cycle(snap)
    c.build()
    return plan(c)


def p0_room(c: Cycle) -> None:
    for job in sorted(c.snap.pending, key=lambda j: (j.submitted_at, j.id)):
        if job.preemptible or c.admission(job) is not None:
            continue
        first = len(c.result.preemptions)
        if c.try_preempt(job):
            c.result.preemptions[first:] = [
                Preemption(p.job_id, _prefixed("descheduler (room for P0): ", p.reason),
                           p.by_job, p.kind)
                for p in c.result.preemptions[first:]
            ]


def _prefixed(head: str, reason: str) -> str:
    return reason.prefix(head) if isinstance(reason, Reason) else head + reason


def _whole_node_jobs(c: Cycle) -> list[tuple[JobRequest, list[str]]]:
    """Pending jobs whose replica needs all cards of a node, with those nodes."""
    admitted = {a.job_id for a in c.result.admissions}
    out = []
    for job in sorted(c.snap.pending, key=lambda j: (-j.priority_value, j.submitted_at, j.id)):
        if job.id in admitted or not mode_of(job).whole_cards(job):
            continue
        names = {t.name for t in allowed_types(job, c.ctx.gpu_types, c.ctx.pools)}
        nodes = [
            n.name for n in c.snap.nodes
            if n.gpu_type in names and n.schedulable and len(n.devices) == job.gpus
        ]
        if nodes:
            out.append((job, nodes))
    return out


def _movable(c: Cycle, r: RunningJob, job: JobRequest) -> bool:
    req = r.request
    return (
        req.preemptible
        and req.id not in c.gone
        and req.priority_value <= job.priority_value
        and r.units + EPS < (job.gpus or 0) * max(
            (t.weight for t in allowed_types(job, c.ctx.gpu_types, c.ctx.pools)), default=0.0
        )
        and _run_for_move(c, r)
    )


def _run_for_move(c: Cycle, r: RunningJob) -> bool:
    """Old enough to be stopped (``min_run_time_s``); what a move may throw away is
    bounded per move (:func:`defragment`)."""
    return c.snap.now - r.started_at >= c.snap.config.min_run_time_s


def lost_gpu_s(r: RunningJob, c: Cycle) -> float:
    """Card-seconds of work a move of ``r`` throws away (cards held x time run)."""
    return sum(gpus_held(p, c.ctx.gpu_types) for p in r.placements) * max(
        0.0, c.snap.now - r.started_at)


def defragment(c: Cycle) -> None:
    running = [r for r in c.snap.running if r.request.id not in c.gone]
    budget = 3600.0 * c.snap.config.fair_preemption_max_lost_gpu_h
    for job, nodes in _whole_node_jobs(c):
        if not c.owed(job) or c.admission(job) is not None:
            continue
        options = []
        for name in nodes:
            movers = [r for r in running if any(p.node == name for p in r.placements)]
            if not movers or not all(_movable(c, r, job) for r in movers):
                continue
            if budget > 0 and sum(lost_gpu_s(r, c) for r in movers) > budget + EPS:
                continue
            options.append((sum(lost_work(r, c.snap.now) for r in movers), name, movers))
        for _cost, name, movers in sorted(options, key=lambda o: (o[0], o[1])):
            if _try_move(c, job, name, movers):
                running = [r for r in running if r.request.id not in c.gone]
                break


def _try_move(c: Cycle, job: JobRequest, node: str, movers: list[RunningJob]) -> bool:
    """Stop the movers, admit ``job``, re-place every mover elsewhere; all or nothing
    (one statement over the cycle's books, committed or discarded)."""
    stmt = c.statement()
    for m in movers:
        stmt.release(m)
    done: list[Admission] = []
    for j in [job, *[m.request for m in movers]]:
        adm = c.admission(j)
        if adm is None or (j is job and not any(p.node == node for p in adm.placements)):
            stmt.discard()
            return False
        stmt.reserve(holding(j, adm, c.snap.now))
        done.append(adm)
    stmt.commit()
    c.stopped(m.request.id for m in movers)
    for m in movers:
        c.result.preemptions.append(Preemption(
            m.request.id,
            Reason(ReasonCode.MOVED,
                   f"descheduler: moved off node {node} so job {job.id} can have the whole node",
                   {"node": node, "by_job": job.id}),
            by_job=job.id, kind="preempt",
        ))
    c.result.admissions.extend(done)
    return True

"""Reservations: capacity held for a job that has waited too long.

Backfill lets small jobs pass a big one that does not fit; without a
limit a stream of small jobs starves it forever. So a job waiting longer
than ``reservation_after_s`` that still does not fit gets a reservation
(EASY backfill): we find the earliest time it would fit if running jobs
end as estimated (a doubling, then binary, search over running jobs by
expected end, with ``simulate_remove``), and hold the capacity it would use
that is free now. Later jobs in the cycle may use held capacity only if their
``duration_estimate_s`` ends before that expected start.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.scheduling.context import Hold, PlacementContext
from app.scheduling.demands import held_kind
from app.scheduling.filters import allowed_type_names
from app.scheduling.model import JobRequest, RunningJob
from app.scheduling.modes import mode_of
from app.scheduling.placement import place_job
from app.scheduling.state import ClusterState

MAX_CONSIDERED = 512  # running jobs a reservation looks at (soonest to end)


@dataclass(frozen=True, slots=True)
class Reservation:
    job_id: str
    start: float
    holds: dict[str, Hold]


def expected_end(r: RunningJob, now: float, unknown_s: float) -> float:
    d = r.request.expected_s
    end = r.started_at + d if d is not None else now + unknown_s
    return max(end, now)


def reserve_for(
    job: JobRequest, state: ClusterState, ctx: PlacementContext, running: Sequence[RunningJob]
) -> Reservation | None:
    """Hold capacity for ``job`` at its earliest expected start, or None if it never fits."""
    types = set(allowed_type_names(job, ctx.gpu_types, ctx.pools))
    cpu_only = not mode_of(job).needs_gpu(job)
    relevant = [
        r for r in running
        if cpu_only or any(p.gpu_type in types for p in r.placements)
    ]
    unknown = ctx.config.unknown_duration_s
    relevant.sort(key=lambda r: expected_end(r, ctx.now, unknown))
    relevant = relevant[:MAX_CONSIDERED]
    if not relevant:
        return None

    def fits(k: int):
        with state.simulate_remove(relevant[:k]):
            return place_job(job, state, ctx)

    # the fewest soonest-ending jobs whose end lets it fit: doubling from one, then halving
    # between the last two tries, so a job that fits after a few ends (the common case)
    # costs a few what-ifs of a few jobs each, not a search from the whole list
    n = len(relevant)
    lo, hi = 1, 1
    while fits(hi) is None:
        if hi == n:
            return None
        lo, hi = hi + 1, min(2 * hi, n)
    while lo < hi:
        mid = (lo + hi) // 2
        if fits(mid) is not None:
            hi = mid
        else:
            lo = mid + 1
    with state.simulate_remove(relevant[:lo]):
        placements = place_job(job, state, ctx)
    if placements is None:  # pragma: no cover - monotone in practice
        return None
    start = expected_end(relevant[lo - 1], ctx.now, unknown)
    holds: dict[str, Hold] = {}
    for p in placements:
        node = state.nodes[p.node]
        partial = held_kind(p).partial_card  # a slice or a share: the hold takes the node
        free_now = 0 if partial else sum(1 for d in p.devices if node.devices[d].is_free_whole)
        h = holds.get(p.node)
        cards = free_now + (h.cards if h else 0)
        cpu = min(p.cpu + (h.cpu if h else 0.0), max(node.cpu_free, 0.0))
        mem = min(p.memory_gb + (h.memory_gb if h else 0.0), max(node.memory_free_gb, 0.0))
        full = partial or (h.full if h else False)
        holds[p.node] = Hold(job.id, start, cards, cpu, mem, full)
    return Reservation(job.id, start, holds)


def add_holds(ctx: PlacementContext, res: Reservation) -> None:
    """Merge a reservation's holds into the context (earliest start wins on a shared node)."""
    for name, h in res.holds.items():
        old = ctx.holds.get(name)
        if old is None:
            ctx.holds[name] = h
        else:
            ctx.holds[name] = Hold(
                old.job_id, min(old.start, h.start), old.cards + h.cards, old.cpu + h.cpu,
                old.memory_gb + h.memory_gb, old.full or h.full,
            )

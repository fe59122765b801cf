"""Pool accounting per GPU type, in CU: guaranteed, used, borrowed, lent.

Why a ledger of its own: a pool's right to capacity is not the same as the
capacity being free. A pool may run up to its *guarantee* of a type; the
capacity that no pool is guaranteed is *shared* by pool weight (and creates
no lease); beyond that a pool may *borrow* another pool's idle guarantee,
and every borrow is a lease against a named lender so it can be reclaimed.

Arithmetic per (pool, type), all clamped so nothing goes negative:

- ``own``     = min(guaranteed - lent, used - borrowed)   what runs on its guarantee
- ``shared``  = used - borrowed - own
- ``idle``    = max(0, guaranteed - own - lent)    the guarantee nobody uses
- ``lendable``= min(idle, lend_limit - lent)       (no lend_limit: no cap)

Guarantees that add up to more than a type's capacity are scaled down
proportionally, so a guarantee never promises cards that do not exist.

Non-preemptible jobs (P0) never borrow: a lease must be reclaimable, and a
P0 job is never preempted, so it runs on guarantee or shared capacity only.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from operator import attrgetter

from app.scheduling.leases import lease_outlived, lease_terms, runtime_lower_bound
from app.scheduling.model import (
    JobRequest,
    LeaseGrant,
    PoolInfo,
    RunningJob,
    Snapshot,
)
from app.scheduling.quota import units_by_type
from app.scheduling.state import EPS
from app.scheduling.verdicts import Reason, ReasonCode

_WANT = attrgetter("pool", "gpu_types", "avoid_gpu_types")  # what a pending job may use


def capacity_by_type(snap: Snapshot) -> dict[str, float]:
    """CU of every GPU type in the cluster (schedulable or not: guarantees are
    promises about the fleet, not about this minute's cordons)."""
    cap: dict[str, float] = defaultdict(float)
    for node in snap.nodes:
        t = snap.gpu_types.get(node.gpu_type or "")
        if t is not None:
            cap[t.name] += t.weight * len(node.devices)
    return dict(cap)


@dataclass(frozen=True, slots=True)
class TypeUsage:
    """One pool's numbers for one GPU type (what /v1/pools/{name}/usage shows)."""

    gpu_type: str
    guaranteed: float
    used: float
    borrowed: float
    lent: float
    shared: float
    idle: float
    lendable: float


@dataclass(frozen=True, slots=True)
class Charge:
    """How an admission is paid for, per type: own guarantee, shared, leases."""

    pool: str
    own: Mapping[str, float]
    shared: Mapping[str, float]
    leases: tuple[tuple[str, str, float], ...]  # (lender, gpu_type, units)


@dataclass(slots=True)
class _JobCharge:
    pool: str
    used: dict[str, float]
    leases: list[tuple[str, str, float]] = field(default_factory=list)


class PoolLedger:
    """Mutable per-cycle accounting; ``plan`` says how a job would be paid for,
    and jobs are charged and released through the Book protocol."""

    def __init__(
        self,
        pools: Mapping[str, PoolInfo],
        capacity: Mapping[str, float],
        active: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.pools = dict(pools)
        self.capacity = {t: max(0.0, c) for t, c in capacity.items()}
        self.guaranteed = self._effective_guarantees()
        self.used: dict[tuple[str, str], float] = defaultdict(float)
        self.borrowed: dict[tuple[str, str], float] = defaultdict(float)
        self.lent: dict[tuple[str, str], float] = defaultdict(float)
        self.jobs: dict[str, _JobCharge] = {}
        # (pool, type) pairs that use or want the type: they split shared capacity
        self.active: set[tuple[str, str]] = set(active)
        # derived numbers asked once per admission: capacity and guarantees are fixed for
        # the ledger's life, and ``active`` only grows (so its size dates a weight total)
        self._shared_totals: dict[str, float] = {}
        self._contender_weights: dict[str, tuple[int, float, frozenset[str]]] = {}

    # -- building ---------------------------------------------------------
    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> PoolLedger:
        active: set[tuple[str, str]] = set()
        # a 100,000-job backlog has few distinct wants (found by a C-level pass)
        for pool, gpu_types, avoid in set(map(_WANT, snap.pending)):
            info = snap.pools.get(pool)
            wanted = gpu_types or (info.gpu_types if info else ()) or tuple(snap.gpu_types)
            active.update((pool, t) for t in wanted if t not in avoid)
        running = snap.running
        for r in running:
            pool = r.request.pool
            for p in r.placements:
                if p.gpu_type:
                    active.add((pool, p.gpu_type))
        ledger = cls(snap.pools, capacity_by_type(snap), active)
        for r in running:
            ledger.add_running(r)
        return ledger

    def _effective_guarantees(self) -> dict[tuple[str, str], float]:
        totals: dict[str, float] = defaultdict(float)
        for p in self.pools.values():
            for t, g in p.guaranteed.items():
                totals[t] += max(0.0, g)
        out: dict[tuple[str, str], float] = {}
        for p in self.pools.values():
            for t, g in p.guaranteed.items():
                cap = self.capacity.get(t, 0.0)
                scale = 1.0 if totals[t] <= cap + EPS else (cap / totals[t] if totals[t] else 0.0)
                out[(p.name, t)] = max(0.0, g) * scale
        return out

    def add_running(self, r: RunningJob) -> None:
        leases = [(x.lender, x.gpu_type, x.units) for x in r.leases] if r.leases else []
        self.add(r.request.id, r.request.pool, units_by_type(r.placements), leases)

    def add(
        self, job_id: str, pool: str, used: Mapping[str, float],
        leases: Iterable[tuple[str, str, float]] = (),
    ) -> None:
        """Account a job holding ``used`` CU per type, with its (lender, type, CU) leases."""
        active = self.active
        for t in used:
            active.add((pool, t))
        self._apply(job_id, pool, used, list(leases), +1)

    def _apply(
        self,
        job_id: str,
        pool: str,
        used: Mapping[str, float],
        leases: list[tuple[str, str, float]],
        sign: int,
    ) -> None:
        for t, u in used.items():
            self.used[(pool, t)] = max(0.0, self.used[(pool, t)] + sign * u)
        for lender, t, u in leases:
            self.borrowed[(pool, t)] = max(0.0, self.borrowed[(pool, t)] + sign * u)
            self.lent[(lender, t)] = max(0.0, self.lent[(lender, t)] + sign * u)
        if sign > 0:
            self.jobs[job_id] = _JobCharge(pool, dict(used), list(leases))
        else:
            self.jobs.pop(job_id, None)

    def remove(self, job_id: str) -> None:
        c = self.jobs.get(job_id)
        if c is not None:
            self._apply(job_id, c.pool, c.used, c.leases, -1)

    # -- the Book protocol (app/scheduling/books.py) -------------------------
    def reserve(self, r: RunningJob) -> None:
        """Charge a job to its pool: its CU by type and its leases."""
        self.add_running(r)

    def release(self, r: RunningJob) -> None:
        self.remove(r.request.id)

    # -- derived numbers ---------------------------------------------------
    def guarantee(self, pool: str, t: str) -> float:
        return self.guaranteed.get((pool, t), 0.0)

    def own(self, pool: str, t: str) -> float:
        """Usage on the pool's own guarantee; the part of the guarantee that
        is lent out is not available to it, so usage above that is shared."""
        not_borrowed = max(0.0, self.used[(pool, t)] - self.borrowed[(pool, t)])
        return min(max(0.0, self.guarantee(pool, t) - self.lent[(pool, t)]), not_borrowed)

    def shared_used(self, pool: str, t: str) -> float:
        not_borrowed = max(0.0, self.used[(pool, t)] - self.borrowed[(pool, t)])
        return max(0.0, not_borrowed - self.own(pool, t))

    def idle(self, pool: str, t: str) -> float:
        return max(0.0, self.guarantee(pool, t) - self.own(pool, t) - self.lent[(pool, t)])

    def lendable(self, pool: str, t: str) -> float:
        info = self.pools.get(pool)
        limit = info.lend_limit.get(t) if info else None
        room = math.inf if limit is None else max(0.0, limit - self.lent[(pool, t)])
        return min(self.idle(pool, t), room)

    def shared_total(self, t: str) -> float:
        got = self._shared_totals.get(t)
        if got is None:
            g = sum(v for (_p, tt), v in self.guaranteed.items() if tt == t)
            got = self._shared_totals[t] = max(0.0, self.capacity.get(t, 0.0) - g)
        return got

    def shared_free(self, t: str) -> float:
        used = sum(self.shared_used(p, t) for p in self.pools)
        return max(0.0, self.shared_total(t) - used)

    def _eligible(self, pool: str, t: str) -> bool:
        info = self.pools.get(pool)
        return info is not None and (not info.gpu_types or t in info.gpu_types)

    def shared_limit(self, pool: str, t: str) -> float:
        """Weighted share of the unguaranteed capacity among active pools that
        may use the type (a pool alone gets all of it: work-conserving)."""
        info = self.pools.get(pool)
        if info is None:
            return 0.0
        got = self._contender_weights.get(t)
        if got is None or got[0] != len(self.active):
            active = frozenset(p for p, tt in self.active if tt == t and self._eligible(p, t))
            got = self._contender_weights[t] = (
                len(self.active), sum(self.pools[p].weight for p in active if p in self.pools),
                active,
            )
        total_w = got[1]
        if pool not in got[2]:  # the asking pool contends too
            total_w += info.weight
        return self.shared_total(t) * (info.weight / total_w if total_w > 0 else 1.0)

    def shared_headroom(self, pool: str, t: str) -> float:
        return min(
            self.shared_free(t), max(0.0, self.shared_limit(pool, t) - self.shared_used(pool, t))
        )

    def _whole_share(self, pool: str, t: str, want: float, fits: float) -> float:
        """Shared CU for a job larger than the pool's whole weighted share: a pool below
        its share may take such a job out of free shared capacity, past the share. Else
        the job could never start while another pool wanted the type, and the cards
        stayed idle: two pools each with a gang of the whole type were capped at half
        of it each, forever. The pool then holds more than its share by at most this one
        job; at or above its share it takes nothing more while others contend."""
        limit = self.shared_limit(pool, t)
        if want <= limit + EPS or self.shared_used(pool, t) >= limit - EPS:
            return fits
        return min(want, self.shared_free(t))

    def own_headroom(self, pool: str, t: str) -> float:
        return max(0.0, self.guarantee(pool, t) - self.own(pool, t) - self.lent[(pool, t)])

    def borrowed_total(self, pool: str) -> float:
        return sum(v for (p, _t), v in self.borrowed.items() if p == pool)

    def usage(self, pool: str) -> dict[str, TypeUsage]:
        types = sorted(
            {t for (p, t) in self.guaranteed if p == pool}
            | {t for (p, t), v in self.used.items() if p == pool and v > 0}
            | {t for (p, t), v in self.lent.items() if p == pool and v > 0}
        )
        return {
            t: TypeUsage(
                gpu_type=t,
                guaranteed=self.guarantee(pool, t),
                used=self.used[(pool, t)],
                borrowed=self.borrowed[(pool, t)],
                lent=self.lent[(pool, t)],
                shared=self.shared_used(pool, t),
                idle=self.idle(pool, t),
                lendable=self.lendable(pool, t),
            )
            for t in types
        }

    # -- admission ---------------------------------------------------------
    def return_lease(self, job_id: str, lender: str, t: str, units: float) -> None:
        """Move a lease's charge onto the borrower's own guarantee: the job's
        usage stays, the loan (borrowed and lent) ends."""
        c = self.jobs.get(job_id)
        if c is None:
            return
        for i, (ln, tt, u) in enumerate(c.leases):
            if ln == lender and tt == t and abs(u - units) <= EPS:
                del c.leases[i]
                self.borrowed[(c.pool, t)] = max(0.0, self.borrowed[(c.pool, t)] - u)
                self.lent[(lender, t)] = max(0.0, self.lent[(lender, t)] - u)
                return

    def plan(
        self, job: JobRequest, need: Mapping[str, float], may_borrow: bool = True,
        borrow_wait_s: float = 0.0,
    ) -> Charge | Reason:
        """How the pool pays for ``need`` CU per type, or why it cannot.

        Order: own guarantee, then the pool's weighted share of unguaranteed
        capacity, then leases on other pools' idle guarantee (largest lender
        first, ties by name, so the choice is deterministic). A job with a
        known run-time lower bound borrows only from lenders whose leases
        outlast it (:func:`app.scheduling.leases.lease_outlived`)."""
        bound = runtime_lower_bound(job)
        pool = job.pool
        own: dict[str, float] = {}
        shared: dict[str, float] = {}
        leases: list[tuple[str, str, float]] = []
        info = self.pools.get(pool)
        borrow_room = math.inf
        if info is not None and info.borrow_limit is not None:
            borrow_room = max(0.0, info.borrow_limit - self.borrowed_total(pool))
        for t in sorted(need):
            u = need[t]
            if u <= EPS:
                continue
            if info is None:  # pools unknown to the config: no quota accounting
                shared[t] = u
                continue
            o = min(u, self.own_headroom(pool, t))
            s = min(u - o, self.shared_headroom(pool, t))
            if s < u - o - EPS:
                s = self._whole_share(pool, t, u - o, s)
            rest = u - o - s
            grants: list[tuple[str, str, float]] = []
            can_borrow = job.preemptible and may_borrow
            if rest > EPS and can_borrow:
                lenders = sorted(
                    (p for p in self.pools
                     if p != pool and not lease_outlived(self.pools, pool, p, bound)),
                    key=lambda p: (-self.lendable(p, t), p),
                )
                for lender in lenders:
                    if rest <= EPS or borrow_room <= EPS:
                        break
                    take = min(rest, self.lendable(lender, t), borrow_room)
                    if take <= EPS:
                        continue
                    grants.append((lender, t, take))
                    rest -= take
                    borrow_room -= take
            if rest > EPS:
                short = self._short_leases(pool, t, bound) if can_borrow else None
                if short is not None:  # ("needs > 1800 s" alone left people guessing)
                    return Reason(
                        ReasonCode.POOL_QUOTA,
                        f"needs {bound:.0f} s or more (a run was stopped unfinished after "
                        f"{job.longest_attempt_s or 0.0:.0f} s) but leases last {short:g} s: "
                        f"waits for pool {pool}'s own guarantee "
                        f"({o:g} CU of {t} free of {u:g} needed)",
                        {"pool": pool, "gpu_type": t, "need": u, "own": o, "lease_s": short},
                    )
                borrowable = (
                    0.0
                    if not can_borrow
                    else min(
                        borrow_room + sum(g[2] for g in grants),
                        sum(self.lendable(p, t) for p in self.pools if p != pool),
                    )
                )
                why = (
                    "" if can_borrow
                    else " (non-preemptible jobs do not borrow)" if not job.preemptible
                    else f" (its lease was reclaimed: it may borrow again in {borrow_wait_s:.0f} s)"
                    if borrow_wait_s > 0 else " (its lease was reclaimed recently)"
                )
                return Reason(
                    ReasonCode.POOL_QUOTA,
                    f"pool {pool} cannot cover {u:g} CU of {t}: {o:g} left of its guarantee, "
                    f"{s:g} of shared capacity, {borrowable:g} borrowable{why}",
                    {"pool": pool, "gpu_type": t, "need": u, "own": o, "shared": s,
                     "borrowable": borrowable},
                )
            own[t], shared[t] = o, s
            leases.extend(grants)
        return Charge(pool, own, shared, tuple(leases))

    def _short_leases(self, pool: str, t: str, bound: float | None) -> float | None:
        """The longest lease some lender could give for ``t`` when every such
        lease ends before ``bound`` (so the bound alone stops the borrow)."""
        if bound is None:
            return None
        lengths = [
            lease_terms(self.pools, pool, p)[0]
            for p in self.pools
            if p != pool and self.lendable(p, t) > EPS
        ]
        if not lengths or max(lengths) > bound + EPS:
            return None
        return max(lengths)


def lease_grants(charge: Charge, expiry: Mapping[str, float]) -> tuple[LeaseGrant, ...]:
    """LeaseGrants of a charge; ``expiry`` maps lender pool -> expires_at."""
    return tuple(
        LeaseGrant(borrower=charge.pool, lender=lender, gpu_type=t, units=u,
                   expires_at=expiry[lender])
        for lender, t, u in charge.leases
    )

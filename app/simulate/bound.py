"""A lower bound of mean JCT for a scenario: a time-indexed LP.

No policy can beat it, so a report can say how far each policy is from the
best possible and what share of the best baseline's distance gpuq closes
(``gap``). The relaxation keeps what makes the problem hard here and drops the
rest:

* **kept**: per-type card capacity, which types a job may use (its type list
  and GPU memory: the same ``replica_options`` the core places with), release
  times (a job is not worked on before its submission), speed per type (work
  done on type g in a second is the job's speed on g), and a job never runs
  faster than one whole copy of itself (all its cards at once);
* **kept for long jobs**: a job's last run is one unbroken stretch on one GPU
  type. That holds for every schedule the simulator can make: a preempted,
  moved or failed run starts over from scratch (no checkpoints), so only the
  last run finishes the job, and a run on one node is on one type;
* **relaxed**: gangs of several replicas that may mix types, and short jobs,
  are a fluid (split over types and time, moved for free); node boundaries;
  CPU/memory of nodes; the cards that runs which did not finish held.

Time is cut into ``slots`` equal slots over a horizon long enough for all the
work (the solver takes any slot bounds, ``edges``; every choice gives a valid
bound, and finer slots a tighter one). A job is **whole** when its last run is on
one type and even its fastest run spans at least ``WHOLE_MIN_SLOTS`` slots; the
rest are **fluid**.

*Fluid job* (the fluid LP): ``u[j,g,k]``, seconds job j runs (all its cards) on
type g in slot k. Its completion ``C_j`` is at least its mean processing time
plus half its fastest run time ``q_j`` (work arrives at a rate of at most one
run per ``q_j`` seconds), and the work of slot k happens no earlier than the
slot's start, nor than the job's release ``r_j``; so

    C_j >= sum_k f_jk * max(r_j, start_k) + q_j / 2,   C_j >= r_j + q_j

with ``f_jk`` the fraction of j's work done in slot k.

*Whole job* (a time-indexed start LP, in cumulative form): ``Y[j,g,k]``, the
share of j that started on type g by the end of slot k (k = ``slots``: at or
after the horizon). A run of length ``P`` that starts in slot k starts at or
after ``s_k`` (the slot's start; in the release slot, the release) and before the
slot ends, so it holds its cards for all of every later slot that ends by
``s_k + P``: slots k+1 .. ``last_k``, and ``last_k`` grows with k. Slot m is then
held by the starts in ``first(m)`` .. m-1 (the first k whose ``last_k`` reaches
m), and its term is ``x * len_m * (Y[m-1] - Y[first(m)-1])``. Its completion is at
least ``s_k + P``.

Both kinds share one capacity row per type and slot: the card-seconds each
holds there, at most the type's cards times the slot's length. A real schedule's runs are
a feasible point (its last runs' starts, its fluid jobs' work), so minimising
``sum_j (C_j - r_j)`` bounds the sum of JCTs of any schedule the simulator can
make. Jobs that can never run (no allowed type, or CPU-only) count with their
least possible JCT (0 or their run time); a job a policy leaves unfinished
counts in that policy's mean with its censored JCT (:mod:`app.simulate.measures`),
which the bound does not model apart. Solved with HiGHS's interior point
method through ``scipy.optimize.linprog`` (sparse constraint matrix).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from app.scheduling.filters import allowed_types
from app.scheduling.model import CycleResult
from app.scheduling.modes import replica_options
from app.simulate.replay import ScenarioModel, SimJob, Simulator

# finer slots tighten the bound (a start counts from its slot's start, up to a slot early),
# at a cost that grows faster than the slots (docs/evaluation.md: 400 and 800 slots)
DEFAULT_SLOTS = 400
# a job whose fastest run spans this many slots is whole (module docstring); with fewer
# it would cover at most one slot end to end, and the fluid bound says more of it
WHOLE_MIN_SLOTS = 3


@dataclass(frozen=True, slots=True)
class Bound:
    jct_mean_s: float  # the lower bound of mean JCT over every job of the scenario
    jobs: int
    slots: int
    horizon_s: float
    status: str  # HiGHS's message
    whole_jobs: int = 0  # jobs the LP keeps whole (module docstring)


@dataclass(frozen=True, slots=True)
class _LpJob:
    job: SimJob
    cards: dict[str, float]  # cards of one whole copy, per allowed type
    speed: dict[str, float]  # speed per allowed type

    @property
    def runtime_s(self) -> float:
        """Run time at speed 1."""
        return self.job.runtime_s

    @property
    def one_type(self) -> bool:
        """Its last run is on one type: one allowed type, or one replica of whole cards
        (CU requests and gangs of several replicas may spread one run over types)."""
        req = self.job.request
        return len(self.cards) == 1 or (req.mode != "gpu_units" and req.replicas <= 1)

    @property
    def fastest_s(self) -> float:
        return self.runtime_s / max(self.speed.values())


def _cards(job: SimJob, model: ScenarioModel) -> dict[str, float]:
    """Cards of each allowed type one whole copy of ``job`` holds (the fewest, per type)."""
    c = model.cluster
    req = job.request
    types = allowed_types(req, c.gpu_types, c.pools)
    out: dict[str, float] = {}
    if req.mode == "gpu_units":
        for t in types:
            if t.weight > 0:
                out[t.name] = (req.gpu_units or 0.0) / t.weight
        return out
    for d in replica_options(req, types):
        if d.gpu_type is None:
            continue
        t = c.gpu_types[d.gpu_type]
        cards = d.units / t.weight if t.weight > 0 else float(d.count)
        cards *= max(1, req.replicas)
        out[d.gpu_type] = min(out.get(d.gpu_type, cards), cards)
    return out


def lower_bound(model: ScenarioModel, slots: int = DEFAULT_SLOTS) -> Bound:
    """The LP bound of mean JCT (module docstring)."""
    jobs = Simulator(model, lambda _s: CycleResult()).jobs
    capacity: dict[str, float] = defaultdict(float)
    for n in model.cluster.nodes:
        if n.gpu_type is not None and n.schedulable:
            capacity[n.gpu_type] += len(n.devices)
    fixed = 0.0  # summed least JCTs of jobs outside the LP
    lp: list[_LpJob] = []
    for j in jobs:
        cards = {g: x for g, x in _cards(j, model).items() if capacity.get(g, 0.0) >= x > 0}
        speed = {g: j.spec.speed.get(g, 1.0) for g in cards}
        if not cards:
            # CPU-only: at least its run time; never schedulable: 0 (any bound is)
            fixed += j.runtime_s if j.request.mode == "gpus" and not j.request.gpus else 0.0
            continue
        lp.append(_LpJob(j, cards, speed))
    if not lp:
        return Bound(fixed / max(1, len(jobs)), len(jobs), 0, 0.0, "no GPU jobs")
    # horizon: the last release, the longest job, and all the work spread over every card;
    # doubled while the LP has no room for the fluid jobs' work (type restrictions)
    last = max(x.job.submit_s for x in lp)
    longest = max(x.fastest_s for x in lp)
    work = sum(min(c * x.runtime_s / x.speed[g] for g, c in x.cards.items()) for x in lp)
    # work that can run on one type only must fit that type's cards: without this the
    # first horizon of a window with more A100-only work than the A100s' share was
    # infeasible, and each doubling cost a whole solve
    only: dict[str, float] = defaultdict(float)
    for x in lp:
        if len(x.cards) == 1:
            (g, c), = x.cards.items()
            only[g] += c * x.runtime_s / x.speed[g]
    spread = max([work / max(1.0, sum(capacity.values())),
                  *(w / max(1.0, capacity[g]) for g, w in only.items())])
    horizon = last + longest + spread
    for _ in range(8):
        got = _solve(lp, capacity, [horizon * k / slots for k in range(slots + 1)])
        if got is not None:
            total, message, whole = got
            return Bound((total + fixed) / len(jobs), len(jobs), slots, horizon, message, whole)
        horizon *= 2
    raise RuntimeError("the LP bound found no horizon with room for the work")


class _Matrix:
    """The LP's sparse rows, built one nonzero at a time."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.vals: list[float] = []

    def add(self, row: int, col: int, val: float) -> None:
        self.rows.append(row)
        self.cols.append(col)
        self.vals.append(val)

    def build(self, nrows: int, ncols: int) -> Any:
        from scipy.sparse import coo_array

        return coo_array((self.vals, (self.rows, self.cols)), shape=(nrows, ncols)).tocsr()


def _solve(lp: list[_LpJob], capacity: dict[str, float], edges: list[float]
           ) -> tuple[float, str, int] | None:
    """(sum of the bound's JCTs, solver message, whole jobs) of the LP on the slots bounded
    by ``edges`` (0 .. the horizon; slot k is ``[edges[k], edges[k + 1]]``), or None when
    the horizon is too short for the fluid jobs' work."""
    import numpy as np
    from scipy.optimize import linprog

    slots = len(edges) - 1
    horizon = edges[-1]
    size = [edges[k + 1] - edges[k] for k in range(slots)]
    ends = edges[1:]
    types = sorted(capacity)
    tix = {g: i for i, g in enumerate(types)}
    ub, eq = _Matrix(), _Matrix()
    b_ub = [capacity[g] * size[m] for g in types for m in range(slots)]  # rows: type x slot
    b_eq: list[float] = []
    cost: list[float] = []
    low: list[float] = []

    def var(c: float = 0.0, lo: float = 0.0) -> int:
        cost.append(c)
        low.append(lo)
        return len(cost) - 1

    whole = 0
    for x in lp:
        r = x.job.submit_s
        k0 = min(slots - 1, bisect_right(edges, r) - 1)
        first = size[k0]  # the release slot: "spans" counts slots of its length
        spans = {g: int(x.runtime_s / x.speed[g] // first) for g in x.cards}
        erow = len(b_eq)
        b_eq.append(1.0)
        if x.one_type and min(spans.values()) >= WHOLE_MIN_SLOTS:
            whole += 1
            # a start in slot k (at or after its start, and after r) is C = start + run; by
            # parts over the cumulative Y: Y_k's coefficient is s_k - s_(k+1), with s_k0 = r,
            # s_k the slot's start, and the overflow's s (a start at or after the horizon)
            # the horizon; the overflow's Y is 1
            at = [r, *edges[k0 + 1:slots], horizon]  # s_k0 .. s_slots
            for g, n in x.cards.items():
                run = x.runtime_s / x.speed[g]
                y = [var() for _ in range(k0, slots + 1)]  # Y[k0..slots]
                cost[y[-1]] += at[-1] + run
                for i, v in enumerate(y[:-1]):
                    cost[v] += at[i] - at[i + 1]
                for a, b in zip(y, y[1:], strict=False):  # Y non-decreasing
                    ub.add(len(b_ub), a, 1.0)
                    ub.add(len(b_ub), b, -1.0)
                    b_ub.append(0.0)
                eq.add(erow, y[-1], 1.0)
                # a start in slot k ends at or after at[k] + run, so it holds every later slot
                # that ends by then, end to end: slots k+1 .. last[k] (non-decreasing in k).
                # Slot m is held by the starts in first_k(m) .. m-1: Y[m-1] - Y[first_k(m)-1]
                last = [bisect_right(ends, at[i] + run) - 1 for i in range(slots - k0)]
                for m in range(k0 + 1, slots):
                    f = k0 + bisect_left(last, m)  # the first start slot that holds slot m
                    if f > m - 1:
                        continue
                    ub.add(tix[g] * slots + m, y[m - 1 - k0], n * size[m])
                    if f > k0:
                        ub.add(tix[g] * slots + m, y[f - 1 - k0], -n * size[m])
            continue
        # fluid: u[g,k] seconds of a whole copy on type g in slot k
        per_slot: dict[int, list[int]] = defaultdict(list)
        terms: list[tuple[int, float]] = []
        for g, n in x.cards.items():
            rate = x.speed[g] / x.runtime_s  # fraction of the work per second
            for k in range(k0, slots):
                v = var()
                ub.add(tix[g] * slots + k, v, n)
                per_slot[k].append(v)
                eq.add(erow, v, rate)
                terms.append((v, rate * max(r, edges[k])))
        for k, vs in per_slot.items():  # one whole copy at a time
            for v in vs:
                ub.add(len(b_ub), v, 1.0)
            b_ub.append(size[k])
        # C_j >= sum f t + q/2  <=>  sum f t - C_j <= -q/2
        cj = var(1.0, r + x.fastest_s)
        for v, coef in terms:
            ub.add(len(b_ub), v, coef)
        ub.add(len(b_ub), cj, -1.0)
        b_ub.append(-x.fastest_s / 2)
    bounds = np.zeros((len(cost), 2))
    bounds[:, 0] = low
    bounds[:, 1] = np.inf
    res = linprog(np.array(cost), A_ub=ub.build(len(b_ub), len(cost)), b_ub=np.array(b_ub),
                  A_eq=eq.build(len(b_eq), len(cost)), b_eq=np.array(b_eq), bounds=bounds,
                  method="highs-ipm")
    if res.status == 2:  # infeasible: not enough time for the fluid jobs' work
        return None
    if res.status != 0:
        raise RuntimeError(f"the LP bound was not solved: {res.message}")
    return float(res.fun) - sum(x.job.submit_s for x in lp), str(res.message), whole


def gap(value: float | None, bound: float) -> float | None:
    """How far ``value`` is above the bound, as a share of the bound (0 = optimal)."""
    if value is None or bound <= 0:
        return None
    return value / bound - 1.0


def share_closed(gpuq: float | None, best: float | None, bound: float) -> float | None:
    """The share of the best baseline's gap to the bound that gpuq closes (1 = all of it)."""
    if gpuq is None or best is None or best - bound <= 0:
        return None
    return (best - gpuq) / (best - bound)


def closes_share(gpuq: float, best: float, bound: float, share: float) -> bool:
    """Does gpuq close at least ``share`` of the best baseline's gap to the bound, i.e. is
    its own gap at most ``1 - share`` of the best's? The same as :func:`share_closed` >=
    ``share`` while the best has a gap; where it has none (at the bound, as every policy
    can be on a window where each job starts at once on its fastest card) the share is
    0/0, and gpuq closes it only by being at the bound too. The LP is solved to HiGHS's
    tolerance, so "at" allows a millionth of the bound."""
    slack = 1e-6 * abs(bound)
    return gpuq - bound <= (1.0 - share) * max(0.0, best - bound) + slack

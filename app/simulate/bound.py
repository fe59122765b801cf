"""A lower bound of mean JCT for a scenario: the time-indexed fluid LP.

No policy can beat it, so a report can say how far each policy is from the
best possible and what share of the best baseline's distance gpuq closes
(``gap``). The relaxation keeps what makes the problem hard here and drops the
rest:

* **kept**: per-type card capacity, which types a job may use (its type list
  and GPU memory: the same ``replica_options`` the core places with), release
  times (a job is not worked on before its submission), speed per type (work
  done on type g in a second is the job's speed on g), and a job never runs
  faster than one whole copy of itself (all its cards at once);
* **relaxed**: gangs (a job's cards may be split over types and time, like a
  fluid), preemption cost, CPU/memory of nodes, node boundaries.

Time is cut into ``slots`` equal slots over a horizon long enough for all the
work. Variable ``u[j,g,k]``: seconds job j runs (all its cards) on type g in
slot k. A job's completion ``C_j`` is at least its mean processing time plus
half its fastest run time (work arrives at a rate of at most one run per
``q_j`` seconds, so the mean of the work's time is at most ``C_j - q_j/2``),
and the work of slot k happens no earlier than the slot's start; so

    C_j >= sum_k f_jk * start_k + q_j / 2,   C_j >= r_j + q_j

with ``f_jk`` the fraction of j's work done in slot k. Minimising
``sum_j (C_j - r_j)`` is a valid lower bound of the sum of JCTs of any
schedule (the schedule's own work fractions are feasible). Jobs that can never
run (no allowed type, or CPU-only) count with their least possible JCT (0 or
their run time), which keeps the bound a bound of the censored mean JCT
(:mod:`app.simulate.measures`). Solved with HiGHS through
``scipy.optimize.linprog`` (sparse constraint matrix).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from app.scheduling.filters import allowed_types
from app.scheduling.model import CycleResult
from app.scheduling.modes import replica_options
from app.simulate.replay import ScenarioModel, SimJob, Simulator

DEFAULT_SLOTS = 400  # finer slots tighten the bound (slot starts are early by < 1 slot)


@dataclass(frozen=True, slots=True)
class Bound:
    jct_mean_s: float  # the lower bound of mean JCT over every job of the scenario
    jobs: int
    slots: int
    horizon_s: float
    status: str  # HiGHS's message


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
    """The fluid LP bound of mean JCT (module docstring)."""
    jobs = Simulator(model, lambda _s: CycleResult()).jobs
    capacity: dict[str, float] = defaultdict(float)
    for n in model.cluster.nodes:
        if n.gpu_type is not None and n.schedulable:
            capacity[n.gpu_type] += len(n.devices)
    fixed = 0.0  # summed least JCTs of jobs outside the LP
    lp: list[tuple[SimJob, dict[str, float], dict[str, float], float]] = []
    for j in jobs:
        cards = {g: x for g, x in _cards(j, model).items() if capacity.get(g, 0.0) >= x > 0}
        speed = {g: j.spec.speed.get(g, 1.0) for g in cards}
        if not cards:
            # CPU-only: at least its run time; never schedulable: 0 (any bound is)
            fixed += j.runtime_s if j.request.mode == "gpus" and not j.request.gpus else 0.0
            continue
        lp.append((j, cards, speed, j.runtime_s))
    if not lp:
        return Bound(fixed / max(1, len(jobs)), len(jobs), 0, 0.0, "no GPU jobs")
    # horizon: the last release, the longest job, and all the work spread over every card;
    # doubled while the LP has no room for the work (type restrictions)
    last = max(j.submit_s for j, *_ in lp)
    longest = max(p / max(s.values()) for _, _, s, p in lp)
    work = sum(min(x * p / s[g] for g, x in c.items()) for _, c, s, p in lp)
    # work that can run on one type only must fit that type's cards: without this the
    # first horizon of a window with more A100-only work than the A100s' share was
    # infeasible, and each doubling cost a whole solve
    only: dict[str, float] = defaultdict(float)
    for _, c, s, p in lp:
        if len(c) == 1:
            (g, x), = c.items()
            only[g] += x * p / s[g]
    spread = max([work / max(1.0, sum(capacity.values())),
                  *(w / max(1.0, capacity[g]) for g, w in only.items())])
    horizon = last + longest + spread
    for _ in range(8):
        got = _solve(lp, capacity, horizon, slots)
        if got is not None:
            total, message = got
            total += fixed
            return Bound(total / len(jobs), len(jobs), slots, horizon, message)
        horizon *= 2
    raise RuntimeError("the LP bound found no horizon with room for the work")


def _solve(lp: list[tuple[SimJob, dict[str, float], dict[str, float], float]],
           capacity: dict[str, float], horizon: float, slots: int) -> tuple[float, str] | None:
    """(sum of the bound's JCTs, solver message), or None when the horizon is too short."""
    import numpy as np
    from scipy.optimize import linprog
    from scipy.sparse import coo_array

    dt = horizon / slots
    starts = np.arange(slots) * dt
    types = sorted(capacity)
    tix = {g: i for i, g in enumerate(types)}
    # variables: u[j,g,k] for allowed (g, k >= release slot), then C_j
    ub_rows: list[int] = []
    ub_cols: list[int] = []
    ub_vals: list[float] = []
    eq_rows: list[int] = []
    eq_cols: list[int] = []
    eq_vals: list[float] = []
    b_eq: list[float] = []
    nvar = 0
    ncap = slots * len(types)
    b_ub = [capacity[g] * dt for g in types for _ in range(slots)]
    row = ncap
    cj_terms: list[list[tuple[int, float]]] = []
    for jx, (j, cards, speed, p) in enumerate(lp):
        k0 = min(slots - 1, int(j.submit_s // dt))
        terms: list[tuple[int, float]] = []
        per_slot: dict[int, list[int]] = defaultdict(list)
        for g, x in cards.items():
            for k in range(k0, slots):
                v = nvar
                nvar += 1
                ub_rows.append(tix[g] * slots + k)
                ub_cols.append(v)
                ub_vals.append(x)
                per_slot[k].append(v)
                eq_rows.append(jx)
                eq_cols.append(v)
                eq_vals.append(speed[g] / p)  # fraction of the work per second
                terms.append((v, speed[g] / p * float(starts[k])))
        for vs in per_slot.values():  # one whole copy at a time
            for v in vs:
                ub_rows.append(row)
                ub_cols.append(v)
                ub_vals.append(1.0)
            b_ub.append(dt)
            row += 1
        b_eq.append(1.0)
        cj_terms.append(terms)
    ncj = len(lp)
    c_first = nvar
    nvar += ncj
    # C_j >= sum f t + q/2  <=>  sum f t - C_j <= -q/2
    for jx, (_j, _cards, speed, p) in enumerate(lp):
        for v, coef in cj_terms[jx]:
            ub_rows.append(row)
            ub_cols.append(v)
            ub_vals.append(coef)
        ub_rows.append(row)
        ub_cols.append(c_first + jx)
        ub_vals.append(-1.0)
        b_ub.append(-(p / max(speed.values())) / 2)
        row += 1
    a_ub = coo_array((ub_vals, (ub_rows, ub_cols)), shape=(row, nvar)).tocsr()
    a_eq = coo_array((eq_vals, (eq_rows, eq_cols)), shape=(ncj, nvar)).tocsr()
    cost = np.zeros(nvar)
    cost[c_first:] = 1.0
    bounds = np.zeros((nvar, 2))
    bounds[:, 1] = np.inf
    for jx, (j, _cards, speed, p) in enumerate(lp):
        bounds[c_first + jx, 0] = j.submit_s + p / max(speed.values())
    res = linprog(cost, A_ub=a_ub, b_ub=np.array(b_ub), A_eq=a_eq, b_eq=np.array(b_eq),
                  bounds=bounds, method="highs")
    if res.status == 2:  # infeasible: not enough time for the work
        return None
    if res.status != 0:
        raise RuntimeError(f"the LP bound was not solved: {res.message}")
    return float(res.fun) - sum(j.submit_s for j, *_ in lp), str(res.message)


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

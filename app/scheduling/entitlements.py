"""Entitlements: what each team should hold this cycle, from one objective.

Gavel-style (Narayanan et al., OSDI 2020, "heterogeneity-aware max-min
fairness"): work is grouped into **classes** -- a team's jobs that may use
the same GPU types at the same speeds -- and an allocation ``x[k, c, t]``
gives each (team k, class c) cards of each type t. A team's **effective
throughput** is ``sum speed[c, t] * x[k, c, t]``; it is normalised by what
the team would get from its weighted share of every type it can use
(``eq_k``), so a team whose work only runs on slow cards is not "poor"
merely for that. Then, solved with HiGHS (``scipy.optimize.linprog``):

1. **weighted max-min**: raise the common level ``L`` with every team's
   normalised throughput >= ``L``, within each type's cards and each
   class's demand (a team never gets more than its work can use). The
   teams whose constraint binds (a positive dual value) are frozen at that
   level and the rest are raised again, until every team is frozen
   (progressive filling; each round freezes at least one team);
2. **maximise total throughput without lowering anyone**: every team at
   least its max-min throughput, maximise the sum.

Comparative advantage falls out of step 2: a class that runs fast
anywhere is moved off the cards that only a restricted class can use,
because that raises the total without lowering anyone. Nothing here is a
tuned weight: the inputs are the cluster (cards and speed per type), the
teams' weights and the work.

The result is used three ways: the **order** of teams (what each holds per
unit of its entitlement) and the **deficit** that earns a waiting team's job
a reservation (:mod:`app.scheduling.deficit`), and the **preemption** rule
(a team below its entitlement may take from a team that stays at or above
its own after the removal: :mod:`app.scheduling.fair_share`). Placement
does not follow the allocation's types (:func:`Entitlements.type_share`):
sending each job to its class's entitled types was measured worse than its
fastest type (docs/scheduling.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.optimize import linprog

from app.scheduling.filters import allowed_types
from app.scheduling.model import GpuType, JobRequest, PoolInfo, RunningJob, Snapshot, gpus_held
from app.scheduling.modes import mode_of

EPS = 1e-9
SAMPLE = 2000  # pending jobs read for the demand (a larger backlog is sampled)
DUAL_EPS = 1e-7  # a dual value above this marks a binding (bottleneck) team
SLACK = 1e-6  # step 2 keeps each team within this relative margin of its level

ClassKey = tuple[tuple[str, ...], tuple[tuple[str, float], ...]]  # (types, speed table)


def job_cards(job: JobRequest) -> float:
    """Cards the job holds in all (a share as its fraction, a slice as 0.3 of a card, a
    ``gpu_units`` request as one card per replica); 0 for CPU-only work."""
    whole, part = mode_of(job).card_shape(job)
    per = whole + part
    return per * max(1, job.replicas)


def speed_of(table: tuple[tuple[str, float], ...], gpu_type: GpuType) -> float:
    """A class's speed on a type: its own table (a missing type runs at 1), else the
    operator's ``GpuType.speed``."""
    if table:
        return next((v for t, v in table if t == gpu_type.name), 1.0)
    return gpu_type.speed


@dataclass(frozen=True, slots=True)
class ClassDemand:
    """The cards one team's class of work wants (running and pending)."""

    team: str
    key: ClassKey
    cards: float


@dataclass(slots=True)
class Entitlements:
    """The cycle's allocation: cards per (team, class, type) and each team's throughput.

    ``throughput[k]`` is in *type-speed cards* (cards x ``GpuType.speed``), the unit
    the deficit compares with what the team holds (:func:`held_throughput`).
    """

    cards: dict[tuple[str, ClassKey], dict[str, float]] = field(default_factory=dict)
    throughput: dict[str, float] = field(default_factory=dict)
    by_type: dict[str, dict[str, float]] = field(default_factory=dict)  # team -> type -> cards
    levels: dict[str, float] = field(default_factory=dict)  # normalised max-min level per team
    by_class: dict[ClassKey, dict[str, float]] = field(default_factory=dict)  # all teams'

    def of(self, team: str) -> float:
        return self.throughput.get(team, 0.0)

    def type_share(self, key: ClassKey, gpu_type: str) -> float:
        """The share of the class's entitled cards (all teams') of ``gpu_type`` (0..1):
        where the allocation puts this kind of work. Per class, not per team, so placement
        scores stay shared by every team's jobs of one shape."""
        alloc = self.by_class.get(key)
        if not alloc:
            return 0.0
        total = sum(alloc.values())
        return alloc.get(gpu_type, 0.0) / total if total > EPS else 0.0


class Classifier:
    """A job's class (allowed types after pool, list, memory and sharing rules, and its
    speed table), cached by the fields that decide it."""

    def __init__(self, gpu_types: Mapping[str, GpuType], pools: Mapping[str, PoolInfo]) -> None:
        self.gpu_types = gpu_types
        self.pools = pools
        self._memo: dict[tuple, ClassKey] = {}

    def __call__(self, job: JobRequest) -> ClassKey:
        # the mode's name in the key (its object is asked only on a miss: this runs for
        # every pending job of a cycle)
        k = (job.pool, job.gpu_types, job.avoid_gpu_types, job.min_gpu_memory_gb, job.mode,
             job.speed)
        got = self._memo.get(k)
        if got is None:
            share = mode_of(job).shareable_only
            names = tuple(sorted(
                t.name for t in allowed_types(job, self.gpu_types, self.pools)
                if not share or t.shareable
            ))
            got = self._memo[k] = (names, tuple(sorted(job.speed)))
        return got


def demands(
    running: Iterable[RunningJob], pending: Iterable[JobRequest], classify: Classifier,
    gpu_types: Mapping[str, GpuType],
) -> list[ClassDemand]:
    """Cards wanted per (team, class): what running work holds and pending work asks."""
    acc: dict[tuple[str, ClassKey], float] = {}
    work = [(r.request, sum(gpus_held(p, gpu_types) for p in r.placements)) for r in running]
    # a huge backlog is sampled with a fixed stride (each sampled job counts for the
    # stride): past SAMPLE jobs, demand is far beyond capacity and only its mix matters
    queue = pending if isinstance(pending, list) else list(pending)
    stride = max(1, len(queue) // SAMPLE)
    work += [(j, job_cards(j) * stride) for j in queue[::stride]]
    for job, cards in work:
        if cards <= 0:
            continue
        key = classify(job)
        if not key[0]:
            continue  # fits no type: never runs, entitled to nothing
        acc[(job.team, key)] = acc.get((job.team, key), 0.0) + cards
    return [ClassDemand(team, key, cards) for (team, key), cards in sorted(acc.items())]


def allocate(
    capacity: Mapping[str, float],
    classes: list[ClassDemand],
    weights: Mapping[str, float],
    gpu_types: Mapping[str, GpuType],
) -> Entitlements:
    """Weighted max-min over normalised effective throughput, then the most throughput
    without lowering anyone (module docstring). ``capacity``: cards per type."""
    out = Entitlements()
    usable = {t for c in classes for t in c.key[0]
              if t in gpu_types and capacity.get(t, 0.0) > EPS}
    if len(usable) == 1:
        return _one_type(next(iter(usable)), capacity, classes, weights, gpu_types)
    cols: list[tuple[int, str, float, float]] = []  # (class index, type, class speed, type speed)
    for i, c in enumerate(classes):
        for t in c.key[0]:
            gt = gpu_types.get(t)
            if gt is not None and capacity.get(t, 0.0) > EPS:
                cols.append((i, t, speed_of(c.key[1], gt), gt.speed))
    if not cols:
        return out
    teams = sorted({classes[i].team for i, *_ in cols})
    tix = {k: n for n, k in enumerate(teams)}
    w = np.array([max(weights.get(k, 1.0), EPS) for k in teams])
    types = sorted({t for _, t, _, _ in cols})
    nx = len(cols)
    # normalisation: the throughput of the team's weighted share of every type it can use
    best: dict[tuple[str, str], float] = {}
    for i, t, s, _ in cols:
        k = classes[i].team
        best[(k, t)] = max(best.get((k, t), 0.0), s)
    eq = np.zeros(len(teams))
    for (k, t), s in best.items():
        eq[tix[k]] += capacity[t] * s
    eq *= w / w.sum()
    eq = np.maximum(eq, EPS)
    # constant rows: capacity per type, demand per class
    a_cap = np.zeros((len(types), nx))
    a_dem = np.zeros((len(classes), nx))
    thr = np.zeros((len(teams), nx))  # class-speed throughput per team
    thr_type = np.zeros((len(teams), nx))  # the same in type speeds (the deficit's unit)
    for j, (i, t, s, ts) in enumerate(cols):
        a_cap[types.index(t), j] = 1.0
        a_dem[i, j] = 1.0
        thr[tix[classes[i].team], j] = s
        thr_type[tix[classes[i].team], j] = ts
    b_cap = np.array([capacity[t] for t in types])
    # a class never gets more than its types hold (clipped, so a backlog's inputs repeat)
    b_dem = np.array([min(c.cards, sum(capacity.get(t, 0.0) for t in c.key[0]))
                      for c in classes])
    frozen = np.full(len(teams), np.nan)
    # light load: when every class can have all it wants at once, that is the max-min
    # allocation and the most throughput (one solve instead of one per level)
    res = linprog(-thr.sum(axis=0), A_ub=np.vstack([a_cap, a_dem]),
                  b_ub=np.concatenate([b_cap, b_dem]), bounds=[(0, None)] * nx,
                  method="highs")
    if res.status == 0 and np.all(a_dem @ res.x >= b_dem - 1e-6):
        frozen[:] = (thr @ res.x) / eq
    else:
        _fill(frozen, eq, thr, a_cap, b_cap, a_dem, b_dem)
        # step 2: most total throughput, nobody below its level
        rows = [a_cap, a_dem, -thr]
        rhs = [b_cap, b_dem, -frozen * eq * (1 - SLACK)]
        res = linprog(-thr.sum(axis=0), A_ub=np.vstack(rows), b_ub=np.concatenate(rhs),
                      bounds=[(0, None)] * nx, method="highs")
    x = res.x if res.status == 0 else np.zeros(nx)
    for j, (i, t, _, _) in enumerate(cols):
        if x[j] <= EPS:
            continue
        k = classes[i].team
        out.cards.setdefault((k, classes[i].key), {})[t] = float(x[j])
        by = out.by_type.setdefault(k, {})
        by[t] = by.get(t, 0.0) + float(x[j])
        bc = out.by_class.setdefault(classes[i].key, {})
        bc[t] = bc.get(t, 0.0) + float(x[j])
    for n, k in enumerate(teams):
        out.throughput[k] = float(thr_type[n] @ x)
        out.levels[k] = float(frozen[n])
    return out


def _one_type(
    t: str, capacity: Mapping[str, float], classes: list[ClassDemand],
    weights: Mapping[str, float], gpu_types: Mapping[str, GpuType],
) -> Entitlements:
    """One usable GPU type: the LP's answer in closed form, weighted water-filling of the
    type's cards over the teams' demands (normalised throughput is cards per unit of
    weight there, and every allocation of all the cards has the same total)."""
    out = Entitlements()
    cap = capacity[t]
    demand: dict[str, float] = {}
    for c in classes:
        if t in c.key[0]:
            demand[c.team] = demand.get(c.team, 0.0) + min(c.cards, cap)
    w = {k: max(weights.get(k, 1.0), EPS) for k in demand}
    grant: dict[str, float] = {}
    left, rest = cap, sorted(demand, key=lambda k: demand[k] / w[k])
    while rest:
        level = left / sum(w[k] for k in rest)
        k = rest[0]
        if demand[k] <= level * w[k] + EPS:
            grant[k] = demand[k]
            left -= demand[k]
            rest.pop(0)
            continue
        for k in rest:
            grant[k] = level * w[k]
        break
    speed = gpu_types[t].speed
    for c in classes:
        if t not in c.key[0] or demand.get(c.team, 0.0) <= EPS:
            continue
        x = grant[c.team] * min(c.cards, cap) / demand[c.team]
        if x <= EPS:
            continue
        out.cards.setdefault((c.team, c.key), {})[t] = x
        by = out.by_type.setdefault(c.team, {})
        by[t] = by.get(t, 0.0) + x
        bc = out.by_class.setdefault(c.key, {})
        bc[t] = bc.get(t, 0.0) + x
    total_w = sum(w.values())
    for k, g in grant.items():
        out.throughput[k] = g * speed
        out.levels[k] = g / (w[k] / total_w * cap) if cap > 0 else 0.0
    return out


def _fill(frozen: np.ndarray, eq: np.ndarray, thr: np.ndarray, a_cap: np.ndarray,
          b_cap: np.ndarray, a_dem: np.ndarray, b_dem: np.ndarray) -> None:
    """Step 1, progressive filling: raise the common level of the teams not yet frozen;
    freeze those whose constraint binds (positive dual); repeat. Fills ``frozen``."""
    nx = a_cap.shape[1]
    n_cap, n_dem = a_cap.shape[0], a_dem.shape[0]
    while np.isnan(frozen).any():
        free = np.isnan(frozen)
        c = np.zeros(nx + 1)
        c[-1] = -1.0
        rows = [np.hstack([a_cap, np.zeros((n_cap, 1))]),
                np.hstack([a_dem, np.zeros((n_dem, 1))]),
                # free teams: eq_k * L - thr_k x <= 0; frozen: -thr_k x <= -level_k * eq_k
                np.hstack([-thr, np.where(free, eq, 0.0)[:, None]])]
        rhs = [b_cap, b_dem, np.where(free, 0.0, -np.nan_to_num(frozen) * eq * (1 - SLACK))]
        res = linprog(c, A_ub=np.vstack(rows), b_ub=np.concatenate(rhs),
                      bounds=[(0, None)] * (nx + 1), method="highs")
        if res.status != 0:  # pragma: no cover - the problem is always feasible (x = 0)
            frozen[free] = 0.0
            return
        level = float(res.x[-1])
        duals = -res.ineqlin.marginals[n_cap + n_dem:]
        binding = free & (duals > DUAL_EPS)
        if not binding.any():
            binding = free  # degenerate: nobody can be raised alone; freeze all
        frozen[binding] = level


def cards_by_type(snap: Snapshot) -> dict[str, float]:
    """Cards per GPU type on schedulable nodes (what can be handed out)."""
    cap: dict[str, float] = {}
    for n in snap.nodes:
        if n.devices and n.gpu_type and n.schedulable:
            cap[n.gpu_type] = cap.get(n.gpu_type, 0.0) + sum(1 for d in n.devices
                                                             if not d.external)
    return cap


def entitlements(snap: Snapshot, classify: Classifier | None = None) -> Entitlements:
    """This cycle's entitlements (memoised in ``snap.static_cache`` by their inputs: a
    cycle in which the work did not change solves nothing)."""
    classify = classify or Classifier(snap.gpu_types, snap.pools)
    cap = cards_by_type(snap)
    classes = demands(snap.running, snap.pending, classify, snap.gpu_types)
    weights = {k: t.weight for k, t in snap.teams.items()}
    cache = snap.static_cache
    key = None
    if cache is not None:
        key = (tuple(sorted(cap.items())),
               tuple((c.team, c.key, round(c.cards, 6)) for c in classes),
               tuple(sorted((c.team, weights.get(c.team, 1.0)) for c in classes)))
        got = cache.get("entitlements")
        if got is not None and got[0] == key:
            return got[1]
    out = allocate(cap, classes, weights, snap.gpu_types)
    if cache is not None:
        cache["entitlements"] = (key, out)
    return out


TOL = 1e-4  # relative: the solver's answers are exact to about SLACK, not to the bit


def within(x: float, entitled: float) -> bool:
    """``x`` is at most ``entitled`` (up to the solver's precision)."""
    return x <= entitled * (1 + TOL) + 1e-6


def at_least(x: float, entitled: float) -> bool:
    """``x`` is at least ``entitled`` (up to the solver's precision)."""
    return x >= entitled * (1 - TOL) - 1e-6


def held_throughput(
    by_type_cu: Mapping[str, float], gpu_types: Mapping[str, GpuType]
) -> float:
    """A team's holding in the entitlement's unit: its CU per type as cards x type speed."""
    total = 0.0
    for t, cu in by_type_cu.items():
        gt = gpu_types.get(t)
        if gt is not None and gt.weight > 0:
            total += cu / gt.weight * gt.speed
    return total

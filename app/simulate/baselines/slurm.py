"""``slurm``: Slurm's multifactor priority with Fair Tree fair-share and backfill.

Modelled from SchedMD's documentation (read, not copied):
``priority_multifactor.html`` (the factors and their weights, usage decay,
"Configuration Example"), ``fair_tree.html`` (the fair-share factor),
``sched_config.html`` and ``slurm.conf.html`` (``doc/man/man5/slurm.conf.5`` in
SchedMD/slurm: ``sched/backfill``, ``bf_interval``, ``bf_max_job_test`` "Default:
500", ``bf_window`` "at least as long as the highest allowed time limit is
generally advisable to prevent job starvation", node ``Weight`` "jobs will be
allocated the nodes with the lowest weight which satisfies their
requirements", ``PriorityMaxAge`` "default 7-0", ``DefaultTime``),
``gres.html`` (GPUs per type, ``--gres=gpu:<type>:N``, ``shard`` for shared
cards).

The operator's settings (:class:`SlurmSettings`, tuned on the tuning windows
by :mod:`app.simulate.baseline_tuning`): ``bf_window`` = the longest time limit of the
jobs seen (at least ``DefaultTime``), ``bf_max_job_test=500``,
``PriorityMaxAge`` and node ``Weight`` by GPU type (``node_weight``: ``speed``
-- higher weight for faster cards, as ``slurm.conf`` advises, so faster cards
stay free for the jobs only they can run; ``fastest`` -- the reverse; ``none``
-- one weight, best fit alone). The speed per type is the operator's table
(``GpuType.speed``), the same gpuq reads.

The configuration modelled (``slurm.conf``):

* one partition with every node; ``SelectType=select/cons_tres``, GRES
  ``gpu:<type>`` per GPU model; a job asks ``--gres=gpu:N`` per replica with
  ``--constraint`` listing the types its request allows (memory fit
  included); a vGPU share job asks ``shard`` of one card; nodes are chosen
  best fit (fewest free GPUs left); a job of several replicas gets one node
  when one holds them all (``select/cons_tres`` allocates the fewest nodes).
* ``PriorityType=priority/multifactor`` with the weights of the
  documentation's configuration example: ``PriorityWeightFairshare=10000``,
  ``PriorityWeightAge=1000`` and a size factor of weight 1000 that counts GPUs
  (GPUs asked / GPUs in the cluster: Slurm's TRES factor,
  ``PriorityWeightTRES=GRES/gpu=1000``, with ``PriorityWeightJobSize=0``, as
  job size counts nodes and CPUs), ``PriorityMaxAge`` from the settings
  (default 7-0), ``PriorityDecayHalfLife=14-0``;
  partition, QOS, nice and association factors 0. A team is an account
  with ``Fairshare`` = its weight; usage is charged with
  ``TRESBillingWeights`` = the GPU type's CU weight per card-second and
  decays with the half-life.
* **Fair Tree** (the default algorithm): accounts ranked by their level
  fair-share ``S / U`` (normalised shares over normalised decayed usage;
  no usage ranks first); fair-share factor = rank from the bottom / number
  of accounts. ``PriorityMaxAge`` from the settings.
* ``PriorityCalcPeriod=5`` (minutes, ``slurm.conf.5``'s default): slurmctld's decay
  thread charges usage and recomputes the fair-share factors once per period, not at
  each scheduling pass, so jobs are ordered by the usage of the last recomputation
  (bench/realslurm.py measured it on real Slurm: eval/fidelity/slurm/calc-period.yaml).
* **Scheduling**: the main scheduler starts jobs in priority order and stops
  at the first that cannot start (the partition is blocked); every
  ``bf_interval=30`` s the backfill scheduler walks up to
  ``bf_max_job_test`` pending jobs in priority order and, against a plan
  of when each node's GPUs free up (running jobs end at start + time limit;
  ``bf_window`` from the settings, ``bf_resolution=60`` s),
  starts a job now only if it fits now without touching capacity planned for
  a higher-priority job, and otherwise plans the job at its earliest start
  (which later jobs then may not delay). A planned job reserves its nodes
  whole over its planned run (the plan is of nodes, not of GPUs: real Slurm
  22.05 did not backfill a 1-GPU job onto a node's free GPUs reserved that way,
  eval/fidelity/gang.yaml in bench/realslurm.py). **Time limit** = the job's
  ``duration_estimate_s``; else, with ``time_limits: predicted`` (the default), the run
  time its account's history predicts (``JobRequest.predicted_s``, the prediction gpuq
  orders by), as a ``job_submit`` plugin would set it, with ``OverTimeLimit=UNLIMITED``
  (``slurm.conf``: a job may outrun it); else ``DefaultTime`` = 2 days.
* No preemption (``PreemptType=preempt/none``, Slurm's default).

Left out: jobs are not killed at their time limit (``OverTimeLimit=UNLIMITED``: a
predicted limit may be short), the
backfill plan counts GPUs per node only (CPU and memory are checked when the
job starts), decayed usage of a job that ended between two cycles
is charged up to the midpoint of the two, the age factor is that of the cycle
(Slurm's, of the last ``PriorityCalcPeriod``), a job whose earliest start lies
beyond ``bf_window`` gets no planned start, no QOS, no reservations made by
administrators, no heterogeneous jobs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

from app.scheduling.model import Admission, CycleResult, JobRequest, Node, RunningJob, Snapshot
from app.scheduling.state import ClusterState
from app.simulate.baselines.common import (
    Placer,
    TypeOption,
    best_fit,
    free_cards,
    job_cards_by_type,
    replica_counts,
    type_options,
)
from app.simulate.baselines.fifo import node_rules_admit

EPS = 1e-9
DAY = 86400.0
WEIGHT_FAIRSHARE = 10000.0
WEIGHT_AGE = 1000.0
WEIGHT_JOB_SIZE = 1000.0
DECAY_HALF_LIFE_S = 14 * DAY
DEFAULT_TIME_S = 2 * DAY
BF_INTERVAL_S = 30.0
BF_RESOLUTION_S = 60.0  # bf_resolution: planned start times are rounded to this
NODE_WEIGHTS = ("speed", "fastest", "none")
TIME_LIMITS = ("predicted", "default")
PRIORITY_CALC_PERIOD_S = 300.0  # PriorityCalcPeriod=5 (minutes): slurm.conf.5's default


@dataclass(frozen=True, slots=True)
class SlurmSettings:
    """The ``slurm.conf`` knobs that matter here (module docstring); the defaults are
    the documentation's (``bf_max_job_test``, ``PriorityMaxAge``) and its advice
    (``bf_window`` >= the longest time limit, faster nodes weighted higher)."""

    priority_max_age_s: float = 7 * DAY  # PriorityMaxAge=7-0
    bf_max_job_test: int = 500
    bf_window_s: float | None = None  # None: the longest time limit seen (>= DefaultTime)
    node_weight: str = "speed"
    # where a job without an estimate gets its time limit: ``predicted`` -- the run time
    # its account's history predicts (what gpuq orders by; set by a ``job_submit``
    # plugin, with ``OverTimeLimit=UNLIMITED`` so a job that outruns it is not killed),
    # ``default`` -- ``DefaultTime``
    time_limits: str = "predicted"
    # PriorityCalcPeriod: the fair-share factors are those of the usage at the last
    # recomputation, one per period from the first cycle (0: every cycle)
    priority_calc_period_s: float = PRIORITY_CALC_PERIOD_S

    def __post_init__(self) -> None:
        if self.node_weight not in NODE_WEIGHTS:
            raise ValueError(f"node_weight must be one of {', '.join(NODE_WEIGHTS)}")
        if self.time_limits not in TIME_LIMITS:
            raise ValueError(f"time_limits must be one of {', '.join(TIME_LIMITS)}")


@dataclass(slots=True)
class NodePlan:
    """One node's GPUs over time: capacity and planned (start, end, cards) uses."""

    cards: float
    uses: list[tuple[float, float, float]] = field(default_factory=list)

    def free_over(self, t0: float, t1: float) -> float:
        """The fewest cards free at any moment of [t0, t1)."""
        points = [t0] + [s for s, _e, _c in self.uses if t0 < s < t1]
        worst = 0.0
        for x in points:
            used = sum(c for s, e, c in self.uses if s <= x < e)
            worst = max(worst, used)
        return self.cards - worst


def time_limit(job: JobRequest, predicted: bool = True) -> float:
    """The job's time limit: its estimate; else (``time_limits: predicted``) the run time
    its account's history predicts (``JobRequest.predicted_s``); else ``DefaultTime``."""
    if job.duration_estimate_s:
        return job.duration_estimate_s
    if predicted and job.predicted_s:
        return job.predicted_s
    return DEFAULT_TIME_S


class SlurmPolicy:
    """slurmctld's priority and scheduling loops; keeps decayed usage between cycles."""

    name = "slurm"

    def __init__(self, settings: SlurmSettings | None = None) -> None:
        self.settings = settings or SlurmSettings()
        self.bf_window_s = self.settings.bf_window_s or DEFAULT_TIME_S
        self.usage: dict[str, float] = defaultdict(float)  # account -> decayed billing-seconds
        self.last_t: float | None = None
        self.seen: dict[str, tuple[str, float, float]] = {}  # job id -> (account, start, bill/s)
        self.last_bf: float | None = None
        self.total_cards = 0.0
        self.calc_at: float | None = None  # the last PriorityCalcPeriod recomputation
        self.calc_usage: dict[str, float] = {}  # the usage as of then

    def time_limit(self, job: JobRequest) -> float:
        return time_limit(job, self.settings.time_limits == "predicted")

    # -- usage and priority -----------------------------------------------------------
    def _charge(self, snap: Snapshot) -> None:
        now = snap.now
        billing: dict[str, tuple[str, float, float]] = {}
        for r in snap.running:
            bill = sum(c * snap.gpu_types[t].weight
                       for t, c in job_cards_by_type(r, snap.gpu_types).items()
                       if t in snap.gpu_types)
            billing[r.request.id] = (r.request.team, r.started_at, bill)
        if self.last_t is None:
            self.last_t = now
        last = self.last_t
        dt = now - last
        if dt > 0:
            decay = 0.5 ** (dt / DECAY_HALF_LIFE_S)
            for a in list(self.usage):
                self.usage[a] *= decay
            for team, start, bill in billing.values():
                ran = now - max(start, last)
                if ran > 0:
                    self.usage[team] += bill * ran
            for job_id, (team, start, bill) in self.seen.items():
                if job_id not in billing:  # ended since the last cycle: charge half the gap
                    ran = (now + last) / 2 - max(start, last)
                    if ran > 0:
                        self.usage[team] += bill * ran
        self.seen = billing
        self.last_t = now

    def _calc_usage(self, snap: Snapshot) -> dict[str, float]:
        """The usage the fair-share factors are computed from: as of the last
        ``PriorityCalcPeriod`` tick (ticks every period from the first cycle; the usage
        charged since the tick by the jobs running now is taken back out)."""
        period = self.settings.priority_calc_period_s
        now = snap.now
        if period <= 0:
            return self.usage
        if self.calc_at is None:
            tick = now
        elif now >= self.calc_at + period - EPS:
            tick = self.calc_at + period * math.floor((now - self.calc_at) / period + EPS)
        else:
            return self.calc_usage
        self.calc_at = tick
        usage = dict(self.usage)
        for team, start, bill in self.seen.values():  # running now (set by _charge)
            ran = now - max(start, tick)
            if ran > 0:
                usage[team] = max(0.0, usage.get(team, 0.0) - bill * ran)
        self.calc_usage = usage
        return usage

    def fairshare_factors(self, snap: Snapshot, accounts: set[str],
                          usage: dict[str, float] | None = None) -> dict[str, float]:
        """Fair Tree on a flat tree: rank by S/U, factor = rank from the bottom / count
        (``usage``: the decayed usage to rank by; none: the usage charged up to now)."""
        usage = self.usage if usage is None else usage
        shares = {a: (snap.teams[a].weight if a in snap.teams else 1.0) for a in accounts}
        s_total = sum(shares.values()) or 1.0
        u_total = sum(usage.get(a, 0.0) for a in accounts)
        level = {}
        for a in accounts:
            s = shares[a] / s_total
            u = usage.get(a, 0.0) / u_total if u_total > 0 else 0.0
            level[a] = math.inf if u <= 0 else s / u
        ranked = sorted(accounts, key=lambda a: (-level[a], a))
        n = len(ranked)
        out: dict[str, float] = {}
        i = 0
        while i < n:  # equal level fair-share: equal rank
            j = i
            while j + 1 < n and level[ranked[j + 1]] == level[ranked[i]]:
                j += 1
            for k in range(i, j + 1):
                out[ranked[k]] = (n - i) / n
            i = j + 1
        return out

    def priorities(self, snap: Snapshot) -> dict[str, float]:
        accounts = {j.team for j in snap.pending} | {r.request.team for r in snap.running}
        fs = self.fairshare_factors(snap, accounts, self._calc_usage(snap))
        out = {}
        for j in snap.pending:
            age = min(1.0, max(0.0, snap.now - j.submitted_at)
                      / self.settings.priority_max_age_s)
            cards = max((o.cards for o in type_options(j, snap)), default=0.0)
            size = min(1.0, cards / self.total_cards) if self.total_cards else 0.0
            out[j.id] = (WEIGHT_FAIRSHARE * fs.get(j.team, 0.0) + WEIGHT_AGE * age
                         + WEIGHT_JOB_SIZE * size)
        return out

    # -- the cycle --------------------------------------------------------------------
    def __call__(self, snap: Snapshot) -> CycleResult:
        if not self.total_cards:
            self.total_cards = float(sum(len(n.devices) for n in snap.nodes if n.gpu_type))
        self._charge(snap)
        result = CycleResult()
        prio = self.priorities(snap)
        order = sorted(snap.pending, key=lambda j: (-j.priority_value, -prio[j.id],
                                                    j.submitted_at, j.id))
        result.order = [j.id for j in order]
        state = ClusterState.from_snapshot(snap)
        placer = Placer(snap, state, best_fit)
        started: dict[str, tuple[JobRequest, tuple]] = {}
        options = {j.id: self._by_weight(type_options(j, snap), snap) for j in order}
        if self.settings.bf_window_s is None:  # bf_window >= the longest time limit
            limits = [self.time_limit(j) for j in snap.pending]
            limits += [self.time_limit(r.request) for r in snap.running]
            self.bf_window_s = max([self.bf_window_s, *limits])
        for j in order:
            if not options[j.id]:
                result.unschedulable[j.id] = "slurm: no GRES type the job's request allows"
        # main scheduler: strict priority order until the first job that cannot start
        for j in order:
            if not options[j.id]:
                continue
            placed = self._start_any(j, options[j.id], placer)
            if placed is None:
                break
            started[j.id] = (j, placed)
        # backfill, every bf_interval
        if self.last_bf is None or snap.now - self.last_bf >= BF_INTERVAL_S - EPS:
            self.last_bf = snap.now
            self._backfill(snap, order, options, placer, started, result)
        for job_id, (_j, placed) in started.items():
            result.admissions.append(Admission(job_id, placed))
        for j in order:
            if j.id not in started and j.id not in result.unschedulable:
                result.reasons.setdefault(j.id, "slurm: Priority (waiting for resources)")
        return result

    def _by_weight(self, opts: list[TypeOption], snap: Snapshot) -> list[TypeOption]:
        """The job's GRES types in node ``Weight`` order (lowest first; stable, so equal
        weights keep the request's order and best fit decides within them)."""
        how = self.settings.node_weight
        if how == "none":
            return opts

        def speed(o: TypeOption) -> float:
            t = snap.gpu_types.get(o.gpu_type) if o.gpu_type else None
            return t.speed if t is not None else 0.0

        return sorted(opts, key=speed, reverse=(how == "fastest"))

    def _start_any(self, job: JobRequest, opts: list[TypeOption], placer: Placer):
        for opt in opts:
            placed = self._one_node(job, opt, placer) or placer.place(job, opt)
            if placed:
                return placed
        return None

    def _one_node(self, job: JobRequest, opt: TypeOption, placer: Placer):
        """A job of several replicas all on one node when a node holds them all (the
        fullest such node): ``select/cons_tres`` allocates the fewest nodes. Real Slurm
        22.05 put eval/fidelity/gang.yaml's 4 x 2-GPU job on the empty node, where
        best fit replica by replica took the other node's 4 free GPUs and 4 of it."""
        replicas, _need = replica_counts(job)
        if replicas < 2 or opt.gpu_type is None:
            return None
        want = chosen_cards(opt) * replicas
        nodes = sorted((free_cards(placer.state.nodes[n]), n)
                       for n in placer.by_type.get(opt.gpu_type, [])
                       if free_cards(placer.state.nodes[n]) + EPS >= want)
        for _f, n in nodes:
            placed = placer.place(job, opt, only=[n])
            if placed:
                return placed
        return None

    # -- backfill -----------------------------------------------------------------------
    def _plan(self, snap: Snapshot, running: list[RunningJob]) -> dict[str, NodePlan]:
        plans = {n.name: NodePlan(float(len(n.devices))) for n in snap.nodes
                 if n.gpu_type and n.schedulable}
        for r in running:
            end = max(r.started_at + self.time_limit(r.request), snap.now + 1.0)
            for p in r.placements:
                if p.node in plans and p.gpu_type:
                    c = p.share if p.share > 0 else float(len(p.devices) or 1)
                    plans[p.node].uses.append((snap.now, end, c))
        return plans

    def _backfill(self, snap, order, options, placer, started, result) -> None:
        running = list(snap.running)
        plans = self._plan(snap, running)
        now = snap.now
        for j, placed in started.values():  # the main scheduler's starts, just now
            for p in placed:
                if p.node in plans and p.gpu_type:
                    c = p.share if p.share > 0 else float(len(p.devices))
                    plans[p.node].uses.append((now, now + self.time_limit(j), c))
        by_type: dict[str, list[str]] = defaultdict(list)
        for n in snap.nodes:
            if n.gpu_type and n.name in plans:
                by_type[n.gpu_type].append(n.name)
        tested = 0
        tainted = any(n.taints for n in snap.nodes)
        for j in order:
            if j.id in started or j.id in result.unschedulable:
                continue
            tested += 1
            if tested > self.settings.bf_max_job_test:
                break
            limit = self.time_limit(j)
            got = self._earliest(j, options[j.id], plans, by_type, now, limit,
                                 self._usable_nodes(j, snap.nodes, tainted))
            if got is None:
                result.reasons[j.id] = "slurm: never fits the plan (Resources)"
                continue
            t, opt, chosen = got
            if t <= now + EPS:
                placed = placer.place(j, opt, only=[n for n, _k in chosen])
                if placed:
                    started[j.id] = (j, placed)
                    for p in placed:
                        if p.gpu_type:
                            c = p.share if p.share > 0 else float(len(p.devices))
                            plans[p.node].uses.append((now, now + limit, c))
                    result.reasons.pop(j.id, None)
                    continue
                # GPUs are free but CPU, memory or the shared cards' packing is not:
                # plan it a little later, like a job whose resources are busy
                t = now + BF_INTERVAL_S
            # the reservation takes its nodes whole: backfill's plan is a map of node
            # bitmaps over time (sched/backfill's node_space), not of GPUs, so no later
            # job may use a reserved node over [t, t + limit), even its spare GPUs
            for n, _k in chosen:
                plans[n].uses.append((t, t + limit, plans[n].cards))
            result.reasons[j.id] = f"slurm: backfill plans its start at t={t:.0f}s (Resources)"

    @staticmethod
    def _usable_nodes(job: JobRequest, nodes: list[Node], tainted: bool) -> set[str] | None:
        """Names of the nodes whose taints and labels admit ``job`` (None: every node;
        a job without a selection on a cluster without taints, the common case)."""
        if not job.node_selector and not tainted:
            return None
        return {n.name for n in nodes if node_rules_admit(job, n)}

    def _earliest(self, job, opts, plans, by_type, now, limit, usable=None):
        """(start, option, [(node, replicas)]) of the earliest start in the plan, or None."""
        replicas, need = replica_counts(job)
        gpu_opts = [o for o in opts if o.gpu_type is not None]
        if not gpu_opts:  # CPU-only: no GPU plan; start now
            return (now, opts[0], []) if opts else None
        # only nodes the job may use (``usable``: taints, node selection, fifo.admits
        # without the room, which the plan itself follows)
        nodes_of = {o.gpu_type: [n for n in by_type.get(o.gpu_type, [])
                                 if usable is None or n in usable] for o in gpu_opts}
        times = {now}
        horizon = now + self.bf_window_s
        for o in gpu_opts:
            for n in nodes_of[o.gpu_type]:
                for s, e, _c in plans[n].uses:
                    for x in (s, e):
                        if now < x <= horizon:
                            times.add(x)
        # bf_resolution: one candidate per resolution step (the latest end in it)
        steps: dict[int, float] = {}
        for x in times:
            k = math.ceil((x - now) / BF_RESOLUTION_S - EPS)
            steps[k] = max(steps.get(k, x), x)
        for t in sorted(steps.values()):
            for o in gpu_opts:
                per = chosen_cards(o)
                if per <= 0:
                    continue
                fits = []
                for n in nodes_of[o.gpu_type]:
                    f = plans[n].free_over(t, t + limit)
                    k = int((f + EPS) // per)
                    if k > 0:
                        fits.append((f, n, k))
                fits.sort()  # best fit: fewest free GPUs first
                whole = [(n, k) for _f, n, k in fits if k >= need]
                if whole:  # the fewest nodes: one, when one holds every replica
                    return t, o, [(whole[0][0], need)]
                chosen, got = [], 0
                for _f, n, k in fits:
                    take = min(k, need - got)
                    chosen.append((n, take))
                    got += take
                    if got >= need:
                        return t, o, chosen
        return None


def chosen_cards(opt: TypeOption) -> float:
    """GPUs one replica of this option takes (whole cards, or a share of one)."""
    d = opt.demand
    if d.kind == "whole":
        return float(d.count)
    if d.kind == "share":
        return d.share
    return 1.0 if d.kind == "mig" else 0.0


def slurm(**settings: object) -> SlurmPolicy:
    """A Slurm model with these :class:`SlurmSettings` (the defaults when none)."""
    return SlurmPolicy(SlurmSettings(**settings))  # type: ignore[arg-type]


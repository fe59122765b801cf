"""``kueue``: Kueue's admission model with one ClusterQueue per team in one cohort.

Modelled from Kueue's documentation and design documents (read, not copied):
``site/content/en/docs/concepts/cluster_queue.md`` (ResourceFlavors, nominal
quota, cohorts and borrowing, ``flavorFungibility``, ``queueingStrategy``),
``site/content/en/docs/concepts/preemption.md`` (``reclaimWithinCohort``,
``withinClusterQueue``, fair sharing) and ``keps/1714-fair-sharing/README.md``
(the share value and the preemption algorithm), all in kubernetes-sigs/kueue.

The configuration modelled (the knobs an operator sets are
:class:`KueueSettings`, tuned on the tuning windows by :mod:`app.simulate.baseline_tuning`;
``apis/kueue/v1beta2/clusterqueue_types.go`` ``FlavorFungibility`` and
``apis/config/v1beta2/configuration_types.go`` ``FairSharing`` name them):

* **ClusterQueues**: one per team, all in one cohort; one resource group
  covering ``nvidia.com/gpu`` (and, with ``cover_cpu_memory``, ``cpu`` and
  ``memory``: a flavor's CPU and memory are those of its nodes), one
  **ResourceFlavor per GPU type**, listed in ``flavor_order``: ``cheapest``
  (ascending CU weight, "spot before on-demand", so big cards stay free for
  the jobs that need them), ``fastest`` (descending speed, the operator's
  table ``GpuType.speed`` -- the one gpuq reads) or ``slowest``. Kueue counts
  cards, not CU; a vGPU share counts its fraction.
* **Nominal quota** (``nominal``): ``weight`` -- each flavor's capacity split
  between the teams in proportion to their ``quota_units`` when every team
  has one, else to their ``weight`` (equal weights: equal split), adding up
  to the capacity; ``cohort`` -- the whole capacity is the cohort's own quota
  (a Cohort with ``nominalQuota``, every ClusterQueue at 0), so every
  admission borrows and only fair sharing decides (no team is ever "within
  its nominal quota" with a gang larger than its slice). No
  ``borrowingLimit``/``lendingLimit``: a team may borrow all idle quota.
* **Flavor assignment**: flavors tried in the fixed order;
  ``whenCanBorrow`` (``MayStopSearch``, the default: the first flavor with
  quota is taken even when that means borrowing; ``TryNextFlavor``: a later
  flavor within nominal quota wins over borrowing, else the first that can
  borrow) and ``whenCanPreempt: TryNextFlavor`` (a flavor that would need
  preemption is passed over for a later one that fits; only when none fits is
  the first flavor that preemption could free used). The job's allowed types
  are its request's (its ``gpu_types``, or a node selector on GPU memory).
* **BestEffortFIFO**: each ClusterQueue's queue in priority then creation
  order; a workload that cannot be admitted is set aside and the next one is
  tried. Each scheduling cycle takes one head per ClusterQueue; heads are
  ordered by the **fair sharing** share value of their ClusterQueue after the
  admission (lowest first), then priority, then creation time.
* **Fair Sharing** (``fairSharing: {enable: true}``, weight = the team's
  weight): share value = GPUs the ClusterQueue uses above its nominal quota
  (summed over flavors) over the cohort's total nominal quota, divided by its
  weight (KEP-1714; with CPU and memory covered, the largest such ratio over
  the three resources). **Preemption**: ``withinClusterQueue: LowerPriority``;
  ``reclaimWithinCohort: Any`` -- a workload that would stay within its own
  nominal quota may preempt any workload of a ClusterQueue that borrows that
  flavor; a borrowing workload may preempt another ClusterQueue's workload by
  the ``preemptionStrategies`` (``strategies``; default both, as Kueue's
  ``defaults.go``): ``LessThanOrEqualToFinalShare`` (that queue's share
  without the workload stays at or above the preemptor's share with it),
  then, only if the workload does not fit yet, ``LessThanInitialShare`` over
  the candidates the first rejected (the preemptor's share with it below that
  queue's share now; one workload per queue), as
  ``pkg/scheduler/preemption/preemption.go`` ``fairPreemptions`` runs them.
  Candidates in order: highest share first, lower priority, most recently
  started; the shortest prefix that makes the workload fit is taken, then
  candidates that turn out unnecessary are put back. **Victims are chosen by
  quota only**: "fits" is ``workloadFits`` of
  ``pkg/scheduler/preemption/preemption.go`` (v0.17.0), the preemptor's quota
  against the ClusterQueue's and cohort's available quota once the candidates'
  usage is removed; where their Pods run is not looked at (node placement is
  kube-scheduler's, after admission), so the victims may free cards spread over
  several nodes.
* **Admission is by quota; the Pods then wait for kube-scheduler.** A workload
  admitted on a flavor (or whose victims were preempted) holds that quota from
  then on; its Pods are placed (all replicas or none, by kube-scheduler's
  default ``NodeResourcesFit`` LeastAllocated scoring) as soon as they fit,
  before any new admission of a later cycle, and the job starts then. Until
  then it keeps its quota (no ``waitForPodsReady`` in the configuration
  modelled, so no timeout evicts it), and the next flavor is not tried (flavor
  assignment does not look at nodes). A preempted workload holds its quota
  until its Pods are gone (``pkg/controller/jobframework/reconciler.go``, the
  eviction branch clears the quota reservation only once the job is no longer
  active): the victims' quota is not given to anyone else in the cycle that
  preempts them, only to the preemptor, which admits on it once they are gone
  (the simulator ends a run at once; the real Pods' termination is the real
  system's lag).

Left out: a workload admitted by quota whose Pods wait is not itself a
preemption candidate here (Kueue could preempt it). No hierarchical cohorts,
no admission checks, no partial admission, no topology-aware scheduling; CPU
and memory are not covered resources unless ``cover_cpu_memory`` (they only constrain the
node fit). Without them a workload may be admitted on a flavor whose nodes can never hold
its Pods (flavor assignment looks at quota, node labels and taints, not at node room:
``pkg/scheduler/flavorassigner/flavorassigner.go`` ``checkFlavorForPodSets``); it keeps
that quota, its Pods pending, for good, as real Kueue does (docs/evaluation.md).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from app.scheduling.model import (
    Admission,
    CycleResult,
    JobRequest,
    Preemption,
    RunningJob,
    Snapshot,
)
from app.scheduling.state import ClusterState
from app.simulate.baselines.common import (
    Placer,
    TypeOption,
    job_cards_by_type,
    least_allocated,
    type_options,
)

EPS = 1e-9
RESOURCES = ("gpu", "cpu", "memory")
Key = tuple[str, str]  # (flavor, resource)
Usage = dict[str, dict[Key, float]]  # team -> (flavor, resource) -> amount
S2A = "LessThanOrEqualToFinalShare"
S2B = "LessThanInitialShare"
STRATEGY_LISTS = ((S2A, S2B), (S2A,), (S2B,))  # the lists Kueue's validation accepts


@dataclass(frozen=True, slots=True)
class KueueSettings:
    """The ClusterQueue/Cohort/Configuration knobs an operator sets (module docstring).
    The defaults are Kueue's own where it has one (fungibility, strategies)."""

    flavor_order: str = "cheapest"  # cheapest | fastest | slowest
    when_can_borrow: str = "MayStopSearch"  # MayStopSearch | TryNextFlavor
    strategies: tuple[str, ...] = (S2A, S2B)
    cover_cpu_memory: bool = False
    nominal: str = "weight"  # weight | cohort

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategies", tuple(self.strategies))
        if self.flavor_order not in ("cheapest", "fastest", "slowest"):
            raise ValueError("flavor_order must be cheapest, fastest or slowest")
        if self.when_can_borrow not in ("MayStopSearch", "TryNextFlavor"):
            raise ValueError("when_can_borrow must be MayStopSearch or TryNextFlavor")
        if self.strategies not in STRATEGY_LISTS:
            raise ValueError(f"strategies must be one of {STRATEGY_LISTS}")
        if self.nominal not in ("weight", "cohort"):
            raise ValueError("nominal must be weight or cohort")


class KueuePolicy:
    """One Kueue cohort; built on the first snapshot it sees (capacity and teams)."""

    name = "kueue"

    def __init__(self, settings: KueueSettings | None = None) -> None:
        self.settings = settings or KueueSettings()
        self.flavors: list[str] = []
        self.capacity: dict[Key, float] = {}
        self.nominal: dict[str, dict[Key, float]] = {}
        self.weight: dict[str, float] = {}
        self.lendable: dict[str, float] = {}  # resource -> the cohort's total nominal quota
        self.resources = RESOURCES if self.settings.cover_cpu_memory else RESOURCES[:1]
        #: workloads admitted by quota whose Pods wait for room: job id -> flavor
        self.reserved: dict[str, str] = {}

    # -- configuration ---------------------------------------------------------
    def setup(self, snap: Snapshot) -> None:
        cap: dict[Key, float] = defaultdict(float)
        for n in snap.nodes:
            if n.gpu_type and n.schedulable:
                cap[(n.gpu_type, "gpu")] += len(n.devices)
                cap[(n.gpu_type, "cpu")] += n.cpu
                cap[(n.gpu_type, "memory")] += n.memory_gb
        types = [t for t in snap.gpu_types if (t, "gpu") in cap]
        how = self.settings.flavor_order
        if how == "cheapest":
            self.flavors = sorted(types, key=lambda t: (snap.gpu_types[t].weight, t))
        else:
            sign = -1.0 if how == "fastest" else 1.0
            self.flavors = sorted(types, key=lambda t: (sign * snap.gpu_types[t].speed, t))
        self.capacity = {k: v for k, v in cap.items() if k[1] in self.resources}
        teams = dict(snap.teams)
        for j in [*snap.pending, *(r.request for r in snap.running)]:
            if j.team not in teams:
                teams[j.team] = None  # type: ignore[assignment]
        quotas = {t: (info.quota_units if info else None) for t, info in teams.items()}
        if quotas and all(q is not None and q > 0 for q in quotas.values()):
            basis = {t: float(q or 0.0) for t, q in quotas.items()}
        else:
            basis = {t: (info.weight if info else 1.0) for t, info in teams.items()}
        total = sum(basis.values()) or 1.0
        cohort = self.settings.nominal == "cohort"
        self.nominal = {t: {k: 0.0 if cohort else c * b / total
                            for k, c in self.capacity.items()} for t, b in basis.items()}
        self.weight = {t: (info.weight if info else 1.0) for t, info in teams.items()}
        self.lendable = defaultdict(float)
        for (_f, r), c in self.capacity.items():
            self.lendable[r] += c

    def _ensure_team(self, team: str) -> None:
        if team not in self.nominal:  # a team the cohort was not configured for
            self.nominal[team] = dict.fromkeys(self.capacity, 0.0)
            self.weight[team] = 1.0

    def demand(self, job: JobRequest, opt: TypeOption) -> dict[Key, float]:
        """What admitting ``job`` on ``opt``'s flavor charges to the ClusterQueue."""
        f = opt.gpu_type
        assert f is not None
        out = {(f, "gpu"): opt.cards}
        if self.settings.cover_cpu_memory:
            n = 1 if job.mode == "gpu_units" else job.replicas
            out[(f, "cpu")] = job.cpu * n
            out[(f, "memory")] = job.memory_gb * n
        return out

    def held(self, r: RunningJob, snap: Snapshot) -> dict[Key, float]:
        """What a running workload is charged, per flavor and resource."""
        out: dict[Key, float] = {(f, "gpu"): c
                                 for f, c in job_cards_by_type(r, snap.gpu_types).items()}
        if self.settings.cover_cpu_memory:
            for p in r.placements:
                if p.gpu_type:
                    out[(p.gpu_type, "cpu")] = out.get((p.gpu_type, "cpu"), 0.0) + p.cpu
                    out[(p.gpu_type, "memory")] = (out.get((p.gpu_type, "memory"), 0.0)
                                                   + p.memory_gb)
        return out

    # -- quota ------------------------------------------------------------------
    def share(self, team: str, usage: Usage) -> float:
        """KEP-1714's share value: per resource, what the queue uses above its nominal
        quota (summed over flavors) over the cohort's lendable quota; the largest, / weight."""
        above: dict[str, float] = defaultdict(float)
        nom = self.nominal[team]
        for k, u in usage[team].items():
            above[k[1]] += max(0.0, u - nom.get(k, 0.0))
        ratios = [a / self.lendable[r] for r, a in above.items() if self.lendable.get(r, 0) > 0]
        w = self.weight.get(team, 1.0)
        return max(ratios, default=0.0) * 1000.0 / (w if w > 0 else 1e-9)

    def quota_mode(self, team: str, need: dict[Key, float], usage: Usage) -> str:
        """``fit`` (within nominal), ``borrow``, ``preempt`` (only if someone leaves), ``no``."""
        room = True
        for k, amount in need.items():
            cap = self.capacity.get(k, 0.0)
            if amount > cap + EPS:
                return "no"
            used = sum(u.get(k, 0.0) for u in usage.values())
            if used + amount > cap + EPS:
                room = False
        if not room:
            return "preempt"
        mine = usage[team]
        within = all(mine.get(k, 0.0) + a <= self.nominal[team].get(k, 0.0) + EPS
                     for k, a in need.items())
        return "fit" if within else "borrow"

    @staticmethod
    def _add(usage: Usage, team: str, amounts: dict[Key, float], sign: float = 1.0) -> None:
        u = usage[team]
        for k, a in amounts.items():
            u[k] = u.get(k, 0.0) + sign * a

    def _borrows(self, team: str, usage: Usage, keys) -> bool:
        """Does ``team`` use more than its nominal quota of any of these flavor-resources?"""
        return any(usage[team].get(k, 0.0) > self.nominal[team].get(k, 0.0) + EPS for k in keys)

    # -- the cycle ----------------------------------------------------------------
    def __call__(self, snap: Snapshot) -> CycleResult:
        if not self.flavors:
            self.setup(snap)
        result = CycleResult()
        usage: Usage = defaultdict(dict)
        for r in snap.running:
            self._ensure_team(r.request.team)
            self._add(usage, r.request.team, self.held(r, snap))
        state = ClusterState.from_snapshot(snap)
        placer = Placer(snap, state, least_allocated)
        self._opts = {j.id: type_options(j, snap) for j in snap.pending}
        self._place_reserved(snap, usage, placer, result)
        queues: dict[str, list[JobRequest]] = defaultdict(list)
        for j in snap.pending:
            self._ensure_team(j.team)
            if j.id not in self.reserved:
                queues[j.team].append(j)
        for q in queues.values():
            q.sort(key=lambda j: (-j.priority_value, j.submitted_at, j.id))
        pos = dict.fromkeys(queues, 0)
        running = list(snap.running)
        gone: set[str] = set()
        self._no_victims: set[tuple] = set()  # shapes that found no victims this cycle
        while True:
            heads = [(t, queues[t][i]) for t, i in pos.items() if i < len(queues[t])]
            if not heads:
                break
            heads.sort(key=lambda h: (self._share_with(h[1], usage), -h[1].priority_value,
                                      h[1].submitted_at, h[1].id))
            for team, job in heads:
                pos[team] += 1
                result.order.append(job.id)
                self._admit(job, snap, usage, placer, running, gone, result)
        return result

    def _opt_on(self, job: JobRequest, flavor: str) -> TypeOption | None:
        return next((o for o in self._opts[job.id] if o.gpu_type == flavor), None)

    def _place_reserved(self, snap: Snapshot, usage: Usage, placer: Placer,
                        result: CycleResult) -> None:
        """The workloads that hold quota while their Pods wait: charged to their
        ClusterQueue, and placed (kube-scheduler's queue: priority, then creation)
        where they fit now."""
        pending = {j.id: j for j in snap.pending}
        self.reserved = {i: f for i, f in self.reserved.items() if i in pending}
        waiting = sorted((pending[i] for i in self.reserved),
                         key=lambda j: (-j.priority_value, j.submitted_at, j.id))
        for job in waiting:
            self._ensure_team(job.team)
            opt = self._opt_on(job, self.reserved[job.id])
            if opt is None:  # its request no longer allows the flavor
                del self.reserved[job.id]
                continue
            self._add(usage, job.team, self.demand(job, opt))
        for job in waiting:
            opt = self._opt_on(job, self.reserved[job.id]) if job.id in self.reserved else None
            if opt is None:
                continue
            placed = placer.place(job, opt)
            if placed:
                del self.reserved[job.id]
                result.admissions.append(Admission(job.id, placed))
            else:
                result.reasons[job.id] = (
                    f"kueue: admitted by quota on flavor {opt.gpu_type}; its pods wait for "
                    "room on the nodes")

    def _reserve(self, job: JobRequest, opt: TypeOption, usage: Usage, placer: Placer,
                 result: CycleResult) -> None:
        """Admit ``job`` by quota on ``opt``'s flavor: its Pods are placed now if they
        fit, else it holds the quota until they do (:meth:`_place_reserved`)."""
        assert opt.gpu_type is not None
        self._add(usage, job.team, self.demand(job, opt))
        placed = placer.place(job, opt)
        if placed:
            result.admissions.append(Admission(job.id, placed))
            return
        self.reserved[job.id] = opt.gpu_type
        result.reasons[job.id] = (
            f"kueue: admitted by quota on flavor {opt.gpu_type}; its pods wait for room on "
            "the nodes")

    def _flavor_opts(self, job: JobRequest) -> list[TypeOption]:
        return sorted((o for o in self._opts[job.id] if (o.gpu_type, "gpu") in self.capacity),
                      key=lambda o: self.flavors.index(o.gpu_type))  # type: ignore[arg-type]

    def _share_with(self, job: JobRequest, usage: Usage) -> float:
        opts = self._flavor_opts(job)
        if not opts:
            return self.share(job.team, usage)
        need = self.demand(job, opts[0])
        self._add(usage, job.team, need)
        try:
            return self.share(job.team, usage)
        finally:
            self._add(usage, job.team, need, -1.0)

    def _admit(self, job: JobRequest, snap: Snapshot, usage: Usage, placer: Placer,
               running: list[RunningJob], gone: set[str], result: CycleResult) -> None:
        opts = self._opts[job.id]
        if not opts:
            result.unschedulable[job.id] = "kueue: no ResourceFlavor the job's request allows"
            return
        cpu_only = [o for o in opts if o.gpu_type is None]
        if cpu_only:  # no GPU quota to charge
            placed = placer.place(job, cpu_only[0])
            if placed:
                result.admissions.append(Admission(job.id, placed))
            else:
                result.reasons[job.id] = "kueue: admitted by quota, pods do not fit"
            return
        preempt_opt: TypeOption | None = None
        borrow_opt: TypeOption | None = None
        chosen: TypeOption | None = None
        try_next = self.settings.when_can_borrow == "TryNextFlavor"
        for opt in self._flavor_opts(job):
            mode = self.quota_mode(job.team, self.demand(job, opt), usage)
            if mode == "fit" or (mode == "borrow" and not try_next):
                chosen = opt
                break
            if mode == "borrow" and borrow_opt is None:
                borrow_opt = opt  # whenCanBorrow: TryNextFlavor
            if mode == "preempt" and preempt_opt is None:
                preempt_opt = opt  # whenCanPreempt: TryNextFlavor
        chosen = chosen or borrow_opt
        if chosen is not None:
            self._reserve(job, chosen, usage, placer, result)
            return
        if preempt_opt is None:
            result.unschedulable[job.id] = "kueue: larger than every allowed flavor"
            return
        if not self._preempt_for(job, preempt_opt, snap, usage, placer, running, gone, result):
            result.reasons[job.id] = (
                f"kueue: flavor {preempt_opt.gpu_type} quota used; nothing may be preempted")

    # -- preemption ----------------------------------------------------------------
    def _fits(self, job: JobRequest, opt: TypeOption, usage: Usage) -> bool:
        """``workloadFits`` (pkg/scheduler/preemption/preemption.go): the workload's
        quota against what is available once the candidates' usage is removed from
        ``usage``; quota only, not where the candidates' Pods run."""
        return self.quota_mode(job.team, self.demand(job, opt), usage) in ("fit", "borrow")

    def _preempt_for(self, job: JobRequest, opt: TypeOption, snap: Snapshot, usage: Usage,
                     placer: Placer, running: list[RunningJob], gone: set[str],
                     result: CycleResult) -> bool:
        f = opt.gpu_type
        assert f is not None
        shape = (job.team, f, opt.demand, job.cpu, job.memory_gb, job.replicas,
                 job.min_available, job.priority_value)
        if shape in self._no_victims:
            return False
        ok = self._search(job, opt, snap, usage, placer, running, gone, result)
        if ok:
            self._no_victims.clear()
        else:
            self._no_victims.add(shape)
        return ok

    def _search(self, job: JobRequest, opt: TypeOption, snap: Snapshot, usage: Usage,
                placer: Placer, running: list[RunningJob], gone: set[str],
                result: CycleResult) -> bool:
        f = opt.gpu_type
        assert f is not None
        team = job.team
        need = self.demand(job, opt)
        keys = list(need)
        held = {r.request.id: {k: v for k, v in self.held(r, snap).items() if k[0] == f}
                for r in running}
        within_nominal = all(usage[team].get(k, 0.0) + a <= self.nominal[team].get(k, 0.0) + EPS
                             for k, a in need.items())
        self._add(usage, team, need)
        mine_after = self.share(team, usage)
        self._add(usage, team, need, -1.0)
        cands = [r for r in running
                 if r.request.id not in gone and held[r.request.id].get((f, "gpu"), 0.0) > 0]
        shares = {t: self.share(t, usage) for t in usage}
        cands.sort(key=lambda r: (r.request.team == team, -shares.get(r.request.team, 0.0),
                                  r.request.priority_value, -r.started_at, r.request.id))
        victims: list[RunningJob] = []
        why: dict[str, str] = {}
        retry: list[RunningJob] = []
        first = self.settings.strategies[0]

        def take(r: RunningJob, reason: str) -> None:
            victims.append(r)
            why[r.request.id] = reason
            self._add(usage, r.request.team, held[r.request.id], -1.0)

        fits = self._fits(job, opt, usage)
        for r in cands:
            if fits:
                break
            y = r.request.team
            if y == team:
                if r.request.priority_value >= job.priority_value:
                    continue
                take(r, "kueue: preempted within the ClusterQueue by a higher priority")
            elif not self._borrows(y, usage, keys):
                continue  # y is not borrowing this flavor
            elif within_nominal:
                take(r, f"kueue: reclaim of nominal quota on {f} by team {team}")
            else:
                if first == S2A:
                    self._add(usage, y, held[r.request.id], -1.0)
                    theirs_after = self.share(y, usage)
                    self._add(usage, y, held[r.request.id])
                    ok = mine_after <= theirs_after + EPS
                else:
                    ok = mine_after < self.share(y, usage) - EPS
                if not ok:
                    retry.append(r)
                    continue
                take(r, f"kueue: fair sharing on {f} for team {team}")
            fits = self._fits(job, opt, usage)
        if not fits and len(self.settings.strategies) > 1 and retry:
            # the second strategy, LessThanInitialShare, over the candidates the first
            # rejected: queues by share, highest first; at most one workload per queue
            done: set[str] = set()
            retry.sort(key=lambda r: (-self.share(r.request.team, usage),
                                      r.request.priority_value, -r.started_at, r.request.id))
            for r in retry:
                y = r.request.team
                if fits:
                    break
                if y in done or not self._borrows(y, usage, keys):
                    continue
                done.add(y)
                if mine_after < self.share(y, usage) - EPS:
                    take(r, f"kueue: fair sharing on {f} for team {team}")
                    fits = self._fits(job, opt, usage)
        if not fits or not victims:
            for v in victims:
                self._add(usage, v.request.team, held[v.request.id])
            return False
        for v in reversed(list(victims)):  # put back what turns out unnecessary
            rest = [x for x in victims if x is not v]
            self._add(usage, v.request.team, held[v.request.id])
            if self._fits(job, opt, usage):
                victims = rest
            else:
                self._add(usage, v.request.team, held[v.request.id], -1.0)
        placer.remove(victims)
        for v in victims:
            gone.add(v.request.id)
            result.preemptions.append(Preemption(v.request.id, why[v.request.id], by_job=job.id))
        # the victims' quota goes to the preemptor only; its Pods start where they fit
        self._reserve(job, opt, usage, placer, result)
        return True


def kueue(**settings: object) -> KueuePolicy:
    """A Kueue model with these :class:`KueueSettings` (the defaults when none)."""
    return KueuePolicy(KueueSettings(**settings))  # type: ignore[arg-type]

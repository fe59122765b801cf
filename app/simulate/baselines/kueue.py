"""``kueue``: Kueue's admission model with one ClusterQueue per team in one cohort.

Modelled from Kueue's documentation and design documents (read, not copied):
``site/content/en/docs/concepts/cluster_queue.md`` (ResourceFlavors, nominal
quota, cohorts and borrowing, ``flavorFungibility``, ``queueingStrategy``),
``site/content/en/docs/concepts/preemption.md`` (``reclaimWithinCohort``,
``withinClusterQueue``, fair sharing) and ``keps/1714-fair-sharing/README.md``
(the share value and the preemption algorithm), all in kubernetes-sigs/kueue.

The configuration modelled:

* **ClusterQueues**: one per team, all in one cohort; one resource
  (``nvidia.com/gpu``), one **ResourceFlavor per GPU type**, listed cheapest
  first (ascending CU weight, then name), the order an administrator would
  list "spot before on-demand" so that big cards stay free for jobs that need
  them. Kueue counts cards, not CU; a vGPU share counts its fraction.
* **Nominal quota** per flavor: the flavor's cards split between the teams in
  proportion to their ``quota_units`` when every team has one, else to their
  ``weight`` (equal weights: equal split). The nominal quotas of a flavor add
  up to its capacity, so the cohort can lend exactly what the cluster has.
  No ``borrowingLimit``/``lendingLimit``: a team may borrow all idle quota.
* **Flavor assignment**: flavors tried in the fixed order; ``whenCanBorrow:
  Borrow`` (the first flavor with quota is taken even when that means
  borrowing) and ``whenCanPreempt: TryNextFlavor`` (a flavor that would need
  preemption is passed over for a later one that fits; only when none fits is
  the first flavor that preemption could free used). The job's allowed types
  are its request's (its ``gpu_types``, or a node selector on GPU memory):
  Kueue itself knows nothing of GPU memory or speed and never prefers a
  tight fit.
* **BestEffortFIFO**: each ClusterQueue's queue in priority then creation
  order; a workload that cannot be admitted is set aside and the next one is
  tried. Each scheduling cycle takes one head per ClusterQueue; heads are
  ordered by the **fair sharing** share value of their ClusterQueue after the
  admission (lowest first), then priority, then creation time.
* **Fair Sharing** (``fairSharing: {enable: true}``, weight = the team's
  weight): share value = GPUs the ClusterQueue uses above its nominal quota
  (summed over flavors) over the cohort's total nominal quota, divided by its
  weight (KEP-1714). **Preemption**: ``withinClusterQueue: LowerPriority``;
  ``reclaimWithinCohort: Any`` -- a workload that would stay within its own
  nominal quota may preempt any workload of a ClusterQueue that borrows that
  flavor; a borrowing workload may preempt another ClusterQueue's workload
  only while that queue's share without it stays at or above the preemptor's
  share with it (strategy ``LessThanOrEqualToFinalShare``). Candidates in
  order: highest share first, lower priority, most recently started; the
  shortest prefix that makes the workload fit is taken, then candidates that
  turn out unnecessary are put back.
* **All-or-nothing**: all replicas of a job are placed or none (the
  ``waitForPodsReady`` semantics), by kube-scheduler's default node scoring
  (``NodeResourcesFit`` LeastAllocated on CPU and memory).

Left out: Kueue admits by quota and lets kube-scheduler place the pods; when
the pods cannot be placed (fragmented nodes) the workload would hold its quota
until the ``waitForPodsReady`` timeout evicts it. Here such a workload is
simply not admitted in that cycle (it is retried in the next one, and the
next flavor is not tried, as Kueue's flavor assignment does not look at
nodes). Preemption and admission happen in the same cycle (Kueue admits once
the victims are gone). No hierarchical cohorts, no admission checks, no
partial admission, no topology-aware scheduling; CPU and memory are not
covered resources (they only constrain the node fit).
"""

from __future__ import annotations

from collections import defaultdict

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
Usage = dict[str, dict[str, float]]  # team -> flavor -> cards


class KueuePolicy:
    """One Kueue cohort; built on the first snapshot it sees (capacity and teams)."""

    name = "kueue"

    def __init__(self) -> None:
        self.flavors: list[str] = []
        self.capacity: dict[str, float] = {}
        self.nominal: dict[str, dict[str, float]] = {}
        self.weight: dict[str, float] = {}
        self.total_nominal = 0.0

    # -- configuration ---------------------------------------------------------
    def setup(self, snap: Snapshot) -> None:
        cap: dict[str, float] = defaultdict(float)
        for n in snap.nodes:
            if n.gpu_type and n.schedulable:
                cap[n.gpu_type] += len(n.devices)
        self.capacity = dict(cap)
        self.flavors = sorted(
            (t for t in snap.gpu_types if t in cap),
            key=lambda t: (snap.gpu_types[t].weight, t),
        )
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
        self.nominal = {t: {f: cap[f] * b / total for f in self.flavors} for t, b in basis.items()}
        self.weight = {t: (info.weight if info else 1.0) for t, info in teams.items()}
        self.total_nominal = sum(cap.values())

    def _ensure_team(self, team: str) -> None:
        if team not in self.nominal:  # a team the cohort was not configured for
            self.nominal[team] = {f: 0.0 for f in self.flavors}
            self.weight[team] = 1.0

    # -- quota ------------------------------------------------------------------
    def share(self, team: str, usage: Usage) -> float:
        """KEP-1714's share value: GPUs above nominal, over the cohort's nominal, / weight."""
        above = sum(max(0.0, u - self.nominal[team].get(f, 0.0))
                    for f, u in usage[team].items())
        w = self.weight.get(team, 1.0)
        if self.total_nominal <= 0:
            return 0.0
        return (above / self.total_nominal) * 1000.0 / (w if w > 0 else 1e-9)

    def quota_mode(self, team: str, flavor: str, cards: float, usage: Usage) -> str:
        """``fit`` (within nominal), ``borrow``, ``preempt`` (only if someone leaves), ``no``."""
        used = sum(u[flavor] for u in usage.values())
        cap = self.capacity.get(flavor, 0.0)
        if used + cards <= cap + EPS:  # the cohort has it unused
            within = usage[team][flavor] + cards <= self.nominal[team].get(flavor, 0.0) + EPS
            return "fit" if within else "borrow"
        return "preempt" if cards <= cap + EPS else "no"

    # -- the cycle ----------------------------------------------------------------
    def __call__(self, snap: Snapshot) -> CycleResult:
        if not self.flavors:
            self.setup(snap)
        result = CycleResult()
        usage: Usage = defaultdict(lambda: defaultdict(float))
        for r in snap.running:
            self._ensure_team(r.request.team)
            for f, c in job_cards_by_type(r, snap.gpu_types).items():
                usage[r.request.team][f] += c
        state = ClusterState.from_snapshot(snap)
        placer = Placer(snap, state, least_allocated)
        queues: dict[str, list[JobRequest]] = defaultdict(list)
        for j in snap.pending:
            self._ensure_team(j.team)
            queues[j.team].append(j)
        for q in queues.values():
            q.sort(key=lambda j: (-j.priority_value, j.submitted_at, j.id))
        pos = dict.fromkeys(queues, 0)
        running = list(snap.running)
        gone: set[str] = set()
        self._opts = {j.id: type_options(j, snap) for j in snap.pending}
        self._no_victims: set[tuple] = set()  # shapes that found no victims this cycle
        while True:
            heads = [(t, queues[t][i]) for t, i in pos.items() if i < len(queues[t])]
            if not heads:
                break
            heads.sort(key=lambda h: (self._share_with(h[1], snap, usage), -h[1].priority_value,
                                      h[1].submitted_at, h[1].id))
            for team, job in heads:
                pos[team] += 1
                result.order.append(job.id)
                self._admit(job, snap, usage, placer, running, gone, result)
        return result

    def _share_with(self, job: JobRequest, snap: Snapshot, usage: Usage) -> float:
        opts = [o for o in self._opts[job.id] if o.gpu_type in self.capacity]
        if not opts:
            return self.share(job.team, usage)
        first = min(opts, key=lambda o: self.flavors.index(o.gpu_type))  # type: ignore[arg-type]
        usage[job.team][first.gpu_type] += first.cards  # type: ignore[index]
        try:
            return self.share(job.team, usage)
        finally:
            usage[job.team][first.gpu_type] -= first.cards  # type: ignore[index]

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
        opts = sorted((o for o in opts if o.gpu_type in self.capacity),
                      key=lambda o: self.flavors.index(o.gpu_type))  # type: ignore[arg-type]
        preempt_opt: TypeOption | None = None
        for opt in opts:
            f = opt.gpu_type
            assert f is not None
            mode = self.quota_mode(job.team, f, opt.cards, usage)
            if mode in ("fit", "borrow"):  # whenCanBorrow: Borrow
                placed = placer.place(job, opt)
                if placed:
                    usage[job.team][f] += opt.cards
                    result.admissions.append(Admission(job.id, placed))
                else:
                    result.reasons[job.id] = (
                        f"kueue: quota on flavor {f} but its pods do not fit on the nodes")
                return
            if mode == "preempt" and preempt_opt is None:
                preempt_opt = opt  # whenCanPreempt: TryNextFlavor
        if preempt_opt is None:
            result.unschedulable[job.id] = "kueue: larger than every allowed flavor"
            return
        if not self._preempt_for(job, preempt_opt, snap, usage, placer, running, gone, result):
            result.reasons[job.id] = (
                f"kueue: flavor {preempt_opt.gpu_type} quota used; nothing may be preempted")

    # -- preemption ----------------------------------------------------------------
    def _fits(self, job: JobRequest, opt: TypeOption, usage: Usage, placer: Placer,
              victims: list[RunningJob]) -> bool:
        if self.quota_mode(job.team, opt.gpu_type, opt.cards, usage) not in ("fit", "borrow"):  # type: ignore[arg-type]
            return False
        return placer.fits_without(job, opt, victims)

    def _preempt_for(self, job: JobRequest, opt: TypeOption, snap: Snapshot, usage: Usage,
                     placer: Placer, running: list[RunningJob], gone: set[str],
                     result: CycleResult) -> bool:
        f = opt.gpu_type
        assert f is not None
        team = job.team
        shape = (team, f, opt.demand, job.cpu, job.memory_gb, job.replicas, job.min_available,
                 job.priority_value)
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
        cards_of = {r.request.id: job_cards_by_type(r, snap.gpu_types).get(f, 0.0)
                    for r in running}
        within_nominal = usage[team][f] + opt.cards <= self.nominal[team].get(f, 0.0) + EPS
        usage[team][f] += opt.cards
        mine_after = self.share(team, usage)
        usage[team][f] -= opt.cards
        cands = [r for r in running if r.request.id not in gone and cards_of[r.request.id] > 0]
        shares = {t: self.share(t, usage) for t in usage}
        cands.sort(key=lambda r: (r.request.team == team, -shares.get(r.request.team, 0.0),
                                  r.request.priority_value, -r.started_at, r.request.id))
        victims: list[RunningJob] = []
        why: dict[str, str] = {}
        for r in cands:
            if self._fits(job, opt, usage, placer, victims):
                break
            y = r.request.team
            c = cards_of[r.request.id]
            if y == team:
                if r.request.priority_value >= job.priority_value:
                    continue
                reason = "kueue: preempted within the ClusterQueue by a higher priority"
            else:
                if usage[y][f] <= self.nominal[y].get(f, 0.0) + EPS:
                    continue  # y is not borrowing this flavor
                if within_nominal:
                    reason = f"kueue: reclaim of nominal quota on {f} by team {team}"
                else:
                    usage[y][f] -= c
                    theirs_after = self.share(y, usage)
                    usage[y][f] += c
                    if theirs_after + EPS < mine_after:
                        continue
                    reason = f"kueue: fair sharing on {f} for team {team}"
            victims.append(r)
            why[r.request.id] = reason
            usage[y][f] -= c
        else:
            if not self._fits(job, opt, usage, placer, victims):
                for v in victims:
                    usage[v.request.team][f] += cards_of[v.request.id]
                return False
        if not victims:
            return False
        for v in reversed(list(victims)):  # put back what turns out unnecessary
            rest = [x for x in victims if x is not v]
            usage[v.request.team][f] += cards_of[v.request.id]
            if self._fits(job, opt, usage, placer, rest):
                victims = rest
            else:
                usage[v.request.team][f] -= cards_of[v.request.id]
        placer.remove(victims)
        placed = placer.place(job, opt)
        if not placed:  # cannot happen: _fits checked the same state
            raise AssertionError("kueue: preemption left the workload unplaceable")
        for v in victims:
            gone.add(v.request.id)
            result.preemptions.append(Preemption(v.request.id, why[v.request.id], by_job=job.id))
        usage[team][f] += opt.cards
        result.admissions.append(Admission(job.id, placed))
        return True


def kueue() -> KueuePolicy:
    return KueuePolicy()

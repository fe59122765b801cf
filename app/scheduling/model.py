"""Plain data the pure scheduling core reads and returns.

The dispatcher builds a :class:`Snapshot` from PostgreSQL and the cluster;
the simulator builds one from a scenario. The core never reads a clock:
``Snapshot.now`` is the time. Decisions come back as data
(:class:`CycleResult`) so the caller performs and persists them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal

RequestMode = Literal["gpus", "gpu_units", "mig", "gpu_share"]


@dataclass(frozen=True, slots=True)
class MigProfile:
    name: str
    memory_gb: float
    compute_fraction: float


@dataclass(frozen=True, slots=True)
class GpuType:
    """A GPU model; ``weight`` is the CU of one whole card."""

    name: str
    memory_gb: float
    weight: float
    mig_profiles: Mapping[str, MigProfile] = field(default_factory=dict)
    shareable: bool = False
    resource_name: str = "nvidia.com/gpu"
    # relative throughput of one card on a typical job (the operator's measurement,
    # docs/operations.md); placement prefers faster types when jobs carry no table
    speed: float = 1.0


@dataclass(slots=True)
class Device:
    """One physical card; either whole, cut into MIG slices, or shared (vGPU).

    A card with a ``mig_layout`` is only ever handed out slice by slice.
    ``share_used`` and ``share_memory_gb`` track vGPU fractions on it.
    ``external`` marks a card held by something gpuq does not manage.
    """

    index: int
    mig_layout: tuple[str, ...] = ()
    whole_used: bool = False
    slices_used: list[bool] = field(default_factory=list)
    share_used: float = 0.0
    share_memory_gb: float = 0.0
    external: bool = False

    def __post_init__(self) -> None:
        if self.mig_layout and len(self.slices_used) != len(self.mig_layout):
            self.slices_used = [False] * len(self.mig_layout)

    @property
    def is_free_whole(self) -> bool:
        return (
            not self.mig_layout
            and not self.whole_used
            and not self.external
            and self.share_used <= 0.0
        )


@dataclass(slots=True)
class Node:
    """A node's capacity plus what is already taken on it."""

    name: str
    gpu_type: str | None
    devices: list[Device]
    cpu: float
    memory_gb: float
    cpu_used: float = 0.0
    memory_used_gb: float = 0.0
    rack: str | None = None
    network: str = "eth"
    nvlink_domain: str | None = None
    # the labels a job may select the node by (JobRequest.node_selector); the Kubernetes
    # adapter passes only those (the GPU product), so that equal nodes keep one signature
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[tuple[str, str, str], ...] = ()  # (key, value, effect)
    schedulable: bool = True
    # What the node's device layer does with its cards (Kubernetes: exclusive, MIG,
    # time-slicing...; app/cluster/k8s_devices.py), shown in GET /v1/nodes. Placement
    # never reads it: a layer gpuq cannot drive offers no devices at all.
    device_layer: Mapping[str, object] = field(default_factory=dict)

    @property
    def cpu_free(self) -> float:
        return self.cpu - self.cpu_used

    @property
    def memory_free_gb(self) -> float:
        return self.memory_gb - self.memory_used_gb

    def free_whole_devices(self) -> list[int]:
        return [d.index for d in self.devices if d.is_free_whole]


@dataclass(frozen=True, slots=True)
class JobRequest:
    """A pending job as the core sees it (one normalized spec)."""

    id: str
    name: str
    team: str
    pool: str
    priority: str
    priority_value: int
    preemptible: bool
    submitted_at: float
    replicas: int = 1
    min_available: int = 1
    gpus: int | None = 0
    gpu_units: float | None = None
    mig: str | None = None
    gpu_share: float | None = None
    min_gpu_memory_gb: float = 0.0
    gpu_types: tuple[str, ...] = ()
    avoid_gpu_types: tuple[str, ...] = ()
    allow_mixed_types: bool = False
    cpu: float = 1.0
    memory_gb: float = 1.0
    placement: str = "binpack"
    topology: str = "none"
    duration_estimate_s: float | None = None
    preemption_count: int = 0
    tolerations: tuple[tuple[str, str, str], ...] = ()
    # The nodes the job may run on by their labels (Kubernetes: the Pod's required node
    # affinity, its nodeSelector folded into each term): some term whose every
    # (key, allowed values) the node's labels meet. Empty: any node (filters.selects).
    node_selector: tuple[tuple[tuple[str, tuple[str, ...]], ...], ...] = ()
    # Thrash guard: when this job was last preempted and by which job, so the
    # core refuses to let it preempt that job back within a window.
    last_preempted_at: float | None = None
    last_preempted_by: str | None = None
    # When a lease of this job was last reclaimed: it may not borrow again
    # within the thrash window (else "always" would just restart it).
    last_reclaimed_at: float | None = None
    # The longest attempt of this job that was stopped before it finished
    # (preempted or reclaimed): it needs more than that, so it is never lent
    # a lease that ends sooner (app/scheduling/leases.runtime_lower_bound).
    longest_attempt_s: float | None = None
    # Relative speed of the job per GPU type ((type, speed), ...), overriding the
    # types' own ``GpuType.speed`` (the operator's table) for this job; a scenario's
    # ``speed`` table): placement prefers the type where the job runs fastest
    # (``placement.speed_tiers``). Empty: the types' own speeds.
    speed: tuple[tuple[str, float], ...] = ()
    # The caller's prediction of the run time of a job without ``duration_estimate_s``:
    # the typical run of its team's earlier jobs of the same shape
    # (app/domain/runtime_history.py); None: no history yet
    predicted_s: float | None = None
    # Nodes this job is not placed on now: a node's kubelet refused its Pod at admission
    # (out of devices after a lost race, affinity), and putting it straight back there
    # would be refused again. Set by the dispatcher for a while (the cluster remembers,
    # bounded, with an expiry); never part of the job's spec.
    avoid_nodes: frozenset[str] = frozenset()

    @property
    def expected_s(self) -> float | None:
        """The run time the core plans with: the job's estimate, else the prediction."""
        d = self.duration_estimate_s
        return d if d is not None else self.predicted_s

    @property
    def mode(self) -> RequestMode:
        if self.gpu_units is not None:
            return "gpu_units"
        if self.mig is not None:
            return "mig"
        if self.gpu_share is not None:
            return "gpu_share"
        return "gpus"


@dataclass(frozen=True, slots=True)
class ReplicaPlacement:
    """Where one replica goes and what it holds there."""

    replica: int
    node: str
    gpu_type: str | None
    devices: tuple[int, ...] = ()  # whole cards, or the card of a share
    mig: tuple[tuple[int, int, str], ...] = ()  # (device, slice index, profile)
    share: float = 0.0  # vGPU fraction of devices[0]
    share_memory_gb: float = 0.0
    units: float = 0.0
    cpu: float = 0.0
    memory_gb: float = 0.0


def gpus_held(p: ReplicaPlacement, gpu_types: Mapping[str, GpuType]) -> float:
    """Cards one placement holds: whole cards, a share's fraction, a slice's CU / card CU
    (the unit every baseline understands: the simulator's measures and the GPU-hours a
    fair-share preemption may throw away)."""
    if not p.gpu_type:
        return 0.0
    if p.share > 0:
        return p.share
    if p.mig:
        t = gpu_types.get(p.gpu_type)
        return p.units / t.weight if t is not None and t.weight > 0 else float(len(p.mig))
    return float(len(p.devices))


@dataclass(frozen=True, slots=True)
class LeaseInfo:
    id: str
    borrower: str
    lender: str
    gpu_type: str
    units: float
    job_id: str
    started_at: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class RunningJob:
    """A job holding capacity (admitted or running)."""

    request: JobRequest
    placements: tuple[ReplicaPlacement, ...]
    started_at: float
    leases: tuple[LeaseInfo, ...] = ()

    @property
    def units(self) -> float:
        return sum(p.units for p in self.placements)


@dataclass(frozen=True, slots=True)
class PoolInfo:
    name: str
    gpu_types: tuple[str, ...] = ()
    guaranteed: Mapping[str, float] = field(default_factory=dict)
    borrow_limit: float | None = None
    lend_limit: Mapping[str, float] = field(default_factory=dict)
    max_borrow_seconds: float = 1800.0
    reclaim: str = "always"
    placement: str = "binpack"
    weight: float = 1.0


@dataclass(frozen=True, slots=True)
class TeamInfo:
    name: str
    pool: str
    allowed_pools: tuple[str, ...] = ()
    quota_units: float | None = None
    quota_by_type: Mapping[str, float] = field(default_factory=dict)
    weight: float = 1.0
    default_priority: str = "P1"


@dataclass(frozen=True, slots=True)
class PriorityInfo:
    name: str
    value: int
    preemptible: bool


@dataclass(frozen=True, slots=True)
class SchedulerConfig:
    """Knobs of the core; every one can be set under ``scheduler:`` in the config."""

    # Score weights (placement is filter then score; 0 turns a term off).

    # memory waste: prefer the card whose memory fits the request most tightly
    w_memory_waste: float = 1.0
    # the pool's GPU types in preference order: earlier types score higher
    w_type_preference: float = 0.5
    # binpack jobs: prefer fuller nodes (and a gang on the fewest nodes)
    w_binpack: float = 1.0
    # spread jobs: prefer emptier nodes (replicas on distinct nodes)
    w_spread: float = 1.0
    # a gang's replicas on the same node, else the same rack
    w_topology: float = 1.0
    # never leave a node with free GPUs but too little CPU/memory to use them
    w_headroom: float = 1.0
    # how much the placement reduces what the expected job mix can still use (FGD-style)
    w_fragmentation: float = 1.0
    # the hard cap: a job pending this long gets a reservation whatever its team is owed
    # (the capacity it needs at its earliest expected start is held, used only by jobs
    # expected to end before then), made before the fair order on planned capacity.
    # Before the cap, a job promoted within its team gets one when its team is owed it
    # (app/scheduling/engine.py): the cap is the wait bound (docs/scheduling.md)
    reservation_after_s: float = 43200.0
    # the deficit's time constant: how long a team's credit for being short of its
    # entitlement lasts (its decay, and its cap: H x entitlement). Long enough that a team
    # owed a big job earns it (credit >= the job's cards x run time, or half the cap);
    # short enough that the past stops counting after a day (app/scheduling/deficit.py)
    fair_horizon_s: float = 86400.0
    # within a team, the shortest predicted run time first (duration_estimate_s), after
    # the promoted jobs (requeued, or waited 2x their prediction, or the hard cap)
    shortest_first: bool = True
    # a running job younger than this is never preempted (lease reclaim excepted)
    min_run_time_s: float = 60.0
    # admissions in one cycle at most
    max_cycle_admissions: int = 100_000
    # fair-share preemption (Kueue's fair sharing): a job that does not fit may stop
    # preemptible jobs of its own priority and pool of teams above their fair share
    # (rules: app/scheduling/fair_share.py)
    fair_preemption: bool = True
    # the GPU-hours of work one fair-share preemption, or one defragment move of the
    # descheduler, may throw away over all the jobs it stops (a stopped job restarts from
    # scratch: cheap, the jobs that just started make room; 0 = no limit)
    fair_preemption_max_lost_gpu_h: float = 8.0
    # A job preempted by X may not preempt X back for this long (anti-thrash).
    thrash_window_s: float = 600.0
    # period of the descheduler's ticks in `gpuq simulate` (the live loop's period is
    # GPUQ_DESCHEDULER_INTERVAL)
    descheduler_interval_s: float = 30.0
    # the descheduler may move small preemptible jobs off big-card nodes to make room for
    # whole-node jobs
    defragment: bool = True
    # The descheduler as a whole (P0 room and defragment); off = the dispatcher
    # cycle alone, e.g. to compare in `gpuq simulate`.
    descheduler: bool = True
    # Grace period given to the pods of a preempted job.
    preemption_grace_s: float = 30.0
    candidates_per_replica: int = 8  # feasible nodes scored per replica (kube's nodes-to-score)
    # Outside gangs, one node per distinct free-capacity state is scored; this caps
    # the states scored per replica (0 = every state: most nodes share a few states).
    candidate_states: int = 0
    # gpuq's term beyond FGD's fragmentation measure (fragmentation.placement_cost): CPU/GPU
    # balance of the node after placement
    w_balance: float = 0.1
    # pressure on the GPU types that type-restricted pending jobs need: unrestricted jobs
    # stay off them among types of equal speed (a job's fastest type with room comes first
    # whatever its pressure: placement.speed_tiers)
    w_type_pressure: float = 1.0
    # reservations one cycle makes at most (each a search over the running jobs): jobs at
    # the hard cap get them first (the oldest of each request shape, oldest first), whatever
    # their place in the fair order, and are admitted or reserved for before the order on
    # planned capacity; promoted jobs get the rest, in the order (app/scheduling/engine.py,
    # capped_first, capped_before_order)
    max_reservations: int = 4
    unknown_duration_s: float = 3600.0  # assumed remaining run time when no estimate is given
    # jobs without GPUs may run on GPU nodes: off by default, they run on CPU-only nodes.
    # gpuq's Pods give a container without a card NVIDIA_VISIBLE_DEVICES=void, but a
    # zero-GPU job still takes CPU and memory a GPU job of the node may need
    cpu_jobs_on_gpu_nodes: bool = False

    @classmethod
    def from_mapping(cls, data: Mapping[str, object] | None) -> SchedulerConfig:
        """Build from the config file's ``scheduler`` mapping (its ``alerts`` are the reports'
        thresholds; a stored mapping from an older release may hold keys no longer read)."""
        if not data:
            return cls()
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in data.items() if k in known})  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class FairState:
    """Each team's deficit at ``at``: type-speed card-seconds it has been owed (negative:
    over-served), decayed and capped (:mod:`app.scheduling.deficit`). The caller keeps
    it between cycles: ``Snapshot.fair`` in, ``CycleResult.fair`` out."""

    at: float
    deficit: Mapping[str, float] = field(default_factory=dict)


# Knobs that existed and were removed, with what replaced them: a config file that still
# sets one is refused with this sentence rather than silently ignored.
REMOVED_KNOBS: dict[str, str] = {
    "aging_s": "removed: a waiting team gains credit (the deficit, fair_horizon_s) and a "
    "waiting job is promoted within its team; there is no aging",
    "comparative_advantage": "removed with the type prices: the entitlements (weighted max-min "
    "over effective throughput) now decide what each team is owed; a job goes to its fastest "
    "allowed type with room",
    "defragment_max_run_s": "removed: a defragment move may throw away at most "
    "fair_preemption_max_lost_gpu_h GPU-hours over the jobs it moves, whatever their age",
    "w_speed": "removed: a job goes to its fastest allowed type with room (types of equal "
    "speed: the score decides), there is no speed weight",
    "w_overshoot": "removed: it was never read (gpu_units requests take the least CU "
    "overshoot by construction)",
}


@dataclass(slots=True)
class Snapshot:
    """Everything one cycle looks at. ``nodes`` carry capacity only; the
    core applies ``running`` on a working copy."""

    now: float
    gpu_types: Mapping[str, GpuType]
    nodes: list[Node]
    pools: Mapping[str, PoolInfo]
    teams: Mapping[str, TeamInfo]
    priorities: Mapping[str, PriorityInfo]
    running: list[RunningJob]
    pending: list[JobRequest]
    config: SchedulerConfig = field(default_factory=SchedulerConfig)
    # Optional, owned by the caller: a dict the core may keep node-capacity
    # summaries in between cycles. Pass the same dict only while ``nodes`` is the
    # same list of unchanged Node objects (the simulator does; None = no reuse).
    static_cache: dict | None = None
    # the deficits the previous cycle returned (None: a first cycle, nobody owed anything)
    fair: FairState | None = None


@dataclass(frozen=True, slots=True)
class LeaseGrant:
    borrower: str
    lender: str
    gpu_type: str
    units: float
    expires_at: float


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: str
    placements: tuple[ReplicaPlacement, ...]
    leases: tuple[LeaseGrant, ...] = ()
    # Messages for the job's events, e.g. "expected run outlasts its lease".
    notes: tuple[str, ...] = ()

    @property
    def units(self) -> float:
        return sum(p.units for p in self.placements)


@dataclass(frozen=True, slots=True)
class Preemption:
    """A running job to stop and requeue; ``kind`` is preempt or reclaim."""

    job_id: str
    reason: str
    by_job: str | None = None
    kind: Literal["preempt", "reclaim"] = "preempt"


@dataclass(frozen=True, slots=True)
class LeaseReturn:
    """A lease ended early because its charge now fits in the borrower pool's
    own free guarantee: the job keeps running, charged to its own pool."""

    lease_id: str
    job_id: str
    borrower: str
    lender: str
    gpu_type: str
    units: float
    reason: str


@dataclass(slots=True)
class CycleResult:
    admissions: list[Admission] = field(default_factory=list)
    preemptions: list[Preemption] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # pending job -> why it waits
    unschedulable: dict[str, str] = field(default_factory=dict)  # job -> why it never can run
    order: list[str] = field(default_factory=list)  # pending jobs in dispatch order
    returned: list[LeaseReturn] = field(default_factory=list)  # leases converted to own
    # the teams' deficits after this cycle: pass them in the next snapshot (None from a
    # policy that keeps none)
    fair: FairState | None = None


Policy = Callable[[Snapshot], CycleResult]
"""A scheduling policy: the live core's ``schedule`` and every baseline (by name:
:mod:`app.scheduling.policies`) take a snapshot and return decisions as data."""

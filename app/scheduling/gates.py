"""Admission as a loop over small gates, in a fixed order, and the one memo of a cycle.

Step 4 of the cycle (:mod:`app.scheduling.engine`) asks each gate in turn; the
first that does not answer :class:`~app.scheduling.verdicts.Fit` decides:

1. :class:`NeverFits` -- no state of the full inventory could hold the job
   (it never runs: ``unschedulable``);
2. :class:`Cordoned` -- it fits the inventory but not its schedulable nodes;
3. :class:`AdmissionCap` -- the cycle's ``max_cycle_admissions`` is reached;
4. :class:`TeamQuota` -- even the cheapest option breaks the team's total
   quota (``Preempt`` when the team runs lower-priority work it may stop; the
   cheapest CU of a signature is remembered, the team's usage is not);
5. :class:`Placement` -- filter and score (``Fit`` carries the placements;
   ``Preempt`` when nothing fits now);
6. :class:`PoolCharge` -- the placement's CU against the team's quota by
   type, then the pool's guarantee, shared share and leases (``Fit`` carries
   the admission).

A ``Preempt`` verdict from any gate goes to the one preemptor
(``Cycle.try_preempt``), which stops the cheapest minimal victim set and
admits the job, or leaves everything as it was; the job then waits with the
gate's reason. The order is the cheapest question first: a backlog of
100,000 jobs that can never run costs one memo lookup each.

**What a gate reads.** Each gate declares the request fields it reads
(``reads``), as node filters declare node aspects
(:mod:`app.scheduling.node_reads`). The *job signature* is the tuple of the
union of the reads of the gates whose answers are remembered
(:data:`REMEMBERED`), and :class:`Memo` is keyed by it: two jobs with equal
signatures get the same answer from those gates, so an answer found for one
serves the other (``tests/unit/test_job_signature.py`` checks the property
with hypothesis). A gate that starts reading a field declares it and the
signature follows; a hand-kept key tuple that forgot a field gave stale
answers without an error. The team and the priority are not in the
signature: a remembered failure that depends on them (a placement failure
includes the preemption search that followed it) has them in its context.
Reservations (``ctx.holds``) are context too: a placement failure is
remembered per hold class (how many holds the job's estimated end precedes).

**How long an answer holds.** Never-fits and cordoned answers, and the
cheapest CU a shape can be charged, hold for the cycle (the inventory does
not change). A placement failure, a failed victim search and a failed
reservation hold while ``ClusterState.release_epoch`` is unchanged: within
a cycle the state only fills up unless something is released, which bumps
the epoch. Quota and pool answers are not remembered (O(1) each).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING, Any, ClassVar

from app.scheduling.job_reads import JOB_FIELDS, check_fields, view
from app.scheduling.model import JobRequest
from app.scheduling.modes import MODE_FIELDS
from app.scheduling.placement import try_place
from app.scheduling.pool_steps import charge
from app.scheduling.quota import units_by_type
from app.scheduling.reasons import cordoned_reason, never_fits
from app.scheduling.verdicts import FIT, Fit, NoFit, Preempt, Reason, ReasonCode, Verdict

if TYPE_CHECKING:
    from app.scheduling.engine import Cycle

EPS = 1e-9
ADMISSION_LIMIT = Reason(ReasonCode.ADMISSION_LIMIT, "cycle admission limit reached; next cycle")
_CAPPED = NoFit(ADMISSION_LIMIT)

# What placement feasibility and score read of a request: its mode and size (the
# fields of every request mode, modes.MODE_FIELDS), the types it may use, its host
# needs, its gang shape and topology, taints it tolerates, the nodes it selects by
# label, and its speed table.
_SHAPE = MODE_FIELDS | frozenset({
    "pool", "min_gpu_memory_gb", "gpu_types", "avoid_gpu_types", "allow_mixed_types", "cpu",
    "memory_gb", "replicas", "min_available", "placement", "topology", "tolerations", "speed",
    "avoid_nodes", "node_selector",
})
# What "could it ever fit" reads: the shape without the speed table and the nodes to
# avoid for now (a node avoided a while is still part of the inventory)
_EVER = _SHAPE - {"speed", "avoid_nodes"}


class Gate:
    """One question of admission. ``reads``: the request fields its answer depends on.
    ``sig`` is the job's signature as the cycle numbers it (:meth:`Memo.number`)."""

    name: ClassVar[str]
    reads: ClassVar[frozenset[str]]
    # its answer for a signature holds for the whole cycle (the inventory only)
    for_cycle: ClassVar[bool] = False

    def applies(self, c: Cycle) -> bool:
        """False when the gate lets every job of this cycle through (it is skipped)."""
        return True

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        """The gate's verdict; ``fit`` is the previous gate's (placements, admission)."""
        raise NotImplementedError


class NeverFits(Gate):
    name = "never_fits"
    reads = _EVER
    for_cycle = True

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        memo = c.memo
        got = memo.entries.get((self.name, sig, ()))
        if got is not None:
            return got[1]
        v = memo.get(self.name, sig)
        if v is None:
            why = never_fits(job, c.static, c.ctx)
            v = memo.put(self.name, sig, FIT if why is None else NoFit(why))
        return v


class Cordoned(Gate):
    name = "cordoned"
    reads = _EVER
    for_cycle = True

    def applies(self, c: Cycle) -> bool:
        return c.ready is not None  # some node is cordoned or not ready

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        memo = c.memo
        v = memo.get(self.name, sig)
        if v is None:
            assert c.ready is not None
            never = never_fits(job, c.ready, c.ctx)
            v = memo.put(self.name, sig,
                         NoFit(cordoned_reason(job, never, c.static)) if never else FIT)
        return v


class AdmissionCap(Gate):
    name = "admission_cap"
    reads = frozenset()

    def applies(self, c: Cycle) -> bool:
        # every admission is one pending job: a cap above the backlog is never reached
        return c.max_admissions < len(c.snap.pending)

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        return _CAPPED if c.admitted >= c.max_admissions else FIT


class TeamQuota(Gate):
    """Rejects without placing when even the cheapest option breaks the team's total
    quota; the exact check of the chosen placement is :class:`PoolCharge`'s."""

    name = "team_quota"
    reads = frozenset({"team"}) | (_EVER - {"cpu", "memory_gb", "placement", "topology",
                                            "tolerations", "allow_mixed_types"})

    def applies(self, c: Cycle) -> bool:
        return bool(c.capped_teams)

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        if job.team not in c.capped_teams:
            return FIT
        why = c.quota_precheck(job, sig)
        if why is None:
            return FIT
        return Preempt(why) if c.may_preempt_own(job, why) else NoFit(why)


class Placement(Gate):
    """Filter then score (:mod:`app.scheduling.placement`); a failure is remembered
    with the reason the job got after the preemptor found nothing."""

    name = "placement"
    reads = _SHAPE

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        holds = c.ctx.holds
        context = (job.priority_value, job.team, c.hold_class(job) if holds else 0)
        got = c.memo.entries.get((self.name, sig, context))  # see Cycle.failure_context
        if got is not None and got[0] == c.state.release_epoch:
            return got[1]  # the NoFit a job of the same signature got
        placed = try_place(job, c.state, c.ctx)
        if placed is None:
            return Preempt(None)  # explained after the preemptor: Cycle.explain_no_room
        return Fit(tuple(placed.placements))


class PoolCharge(Gate):
    """The placement's CU against the team's quota (total and per type), then how its
    pool pays for them (guarantee, shared share, leases: :mod:`app.scheduling.pools`)."""

    name = "pool_charge"
    reads = frozenset({"id", "team", "pool", "preemptible", "last_reclaimed_at",
                       "longest_attempt_s", "duration_estimate_s"})

    def check(self, c: Cycle, job: JobRequest, sig: int, fit: Fit) -> Verdict:
        why = c.ledger.check(job, units_by_type(fit.placements))
        if why is not None:
            return Preempt(why) if c.may_preempt_own(job, why) else NoFit(why)
        adm = charge(job, fit.placements, c.pools, c.snap)
        if isinstance(adm, Reason):
            return Preempt(adm)
        return Fit(fit.placements, adm)


#: The gates in the order admission asks them (documented above and in docs).
GATES: tuple[Gate, ...] = (NeverFits(), Cordoned(), AdmissionCap(), TeamQuota(), Placement(),
                           PoolCharge())
#: The gates whose answers the memo keeps; the job signature is the union of their reads.
REMEMBERED: tuple[Gate, ...] = tuple(g for g in GATES if g.name in {
    "never_fits", "cordoned", "placement"})


def signature_fields(gates: tuple[Gate, ...] = REMEMBERED) -> tuple[str, ...]:
    """The request fields in the job signature, in :class:`JobRequest` order."""
    wanted = frozenset().union(*(g.reads for g in gates))
    check_fields(wanted, "a gate")
    return tuple(f for f in JOB_FIELDS if f in wanted)


#: The job signature: what every remembered gate reads of the request, and nothing else.
job_signature: Callable[[JobRequest], tuple] = view(set(signature_fields()))


class Memo:
    """The cycle's one memo: (what, job signature, context) -> an answer, valid for
    the cycle (``epoch`` None) or while the state's release epoch is the one it was
    stored at. Signatures are numbered once per job (:meth:`number`), so a lookup
    hashes a small key, not the request's fields again."""

    __slots__ = ("entries", "numbers", "passed")

    def __init__(self) -> None:
        self.entries: dict[tuple, tuple[int | None, Any]] = {}
        self.numbers: dict[tuple, int] = {}
        # signatures every leading ``for_cycle`` gate let through (not asked again)
        self.passed: set[int] = set()

    def number(self, job: JobRequest) -> int:
        """The job's signature, numbered (equal signatures, equal numbers)."""
        sig = job_signature(job)
        n = self.numbers.get(sig)
        if n is None:
            n = self.numbers[sig] = len(self.numbers)
        return n

    def get(self, what: str, sig: int, context: Hashable = (),
            epoch: int | None = None) -> Any:
        """The answer stored for the key (None: none, or stored at another epoch)."""
        got = self.entries.get((what, sig, context))
        if got is None or got[0] != epoch:
            return None
        return got[1]

    def put(self, what: str, sig: int, value: Any, context: Hashable = (),
            epoch: int | None = None) -> Any:
        self.entries[(what, sig, context)] = (epoch, value)
        return value

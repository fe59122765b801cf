"""The books a cycle keeps, and tentative changes to them (Volcano's ``Statement``).

Three books record what running jobs hold: the cluster state (cards, slices,
shares, CPU and memory per node: :class:`~app.scheduling.state.ClusterState`),
the team ledger (CU per team and type, for quotas and fair share:
:class:`~app.scheduling.quota.QuotaLedger`) and the pool ledger (guarantees,
shared capacity and leases: :class:`~app.scheduling.pools.PoolLedger`). Each
implements one protocol, :class:`Book`: ``reserve`` a job, ``release`` it.

Every change of a cycle goes to all three through :class:`Books`, and every
tentative change (a preemption what-if, a victim set, a descheduler move) goes
through a :class:`Statement`: its releases and reserves are applied at once and
recorded, then kept (``commit``) or undone in reverse order (``discard``), as
Volcano's ``Statement`` does with evict/pipeline and their undo
(volcano ``pkg/scheduler/framework/statement.go``). A book cannot be forgotten:
a what-if that released a victim from the state and the pool ledger but not
from the team ledger made a team at its quota unable to preempt its own
lower-priority work.

A job being admitted is recorded as the :class:`RunningJob` it becomes
(:func:`holding`), so admissions and stops use the same two calls.
"""

from __future__ import annotations

from typing import Protocol

from app.scheduling.model import Admission, JobRequest, LeaseInfo, RunningJob
from app.scheduling.pools import PoolLedger
from app.scheduling.quota import QuotaLedger
from app.scheduling.state import ClusterState


class Book(Protocol):
    """A record of what running jobs hold."""

    def reserve(self, r: RunningJob) -> None:
        """Record that ``r`` holds its placements (and its leases)."""

    def release(self, r: RunningJob) -> None:
        """Record that ``r`` holds nothing any more."""


def holding(job: JobRequest, adm: Admission, now: float) -> RunningJob:
    """The running job an admission makes (its leases as the pool ledger counts them)."""
    leases = tuple(
        LeaseInfo("", g.borrower, g.lender, g.gpu_type, g.units, job.id, now, g.expires_at)
        for g in adm.leases
    )
    return RunningJob(job, adm.placements, now, leases)


class Books:
    """The cycle's three books, changed together."""

    __slots__ = ("state", "quota", "pools", "all")

    def __init__(self, state: ClusterState, quota: QuotaLedger, pools: PoolLedger) -> None:
        self.state, self.quota, self.pools = state, quota, pools
        self.all: tuple[Book, ...] = (state, quota, pools)

    def reserve(self, r: RunningJob) -> None:
        for b in self.all:
            b.reserve(r)

    def release(self, r: RunningJob) -> None:
        for b in self.all:
            b.release(r)

    def statement(self) -> Statement:
        return Statement(self)


class Statement:
    """Tentative changes to the books: applied now, then committed or discarded.

    A discard is not a release: the cluster state's ``release_epoch`` (which
    tells the cycle's memos that capacity came free) is put back as well, and
    the state's capacity index is left as it was, the order of its nodes
    included (a journal opens with the first change: ``ClusterState.begin``).
    A statement may be used again after it was committed or discarded.
    """

    __slots__ = ("books", "ops", "epoch", "token", "open")

    def __init__(self, books: Books) -> None:
        self.books = books
        # id(job) -> (reserved?, job), in the order the changes were made
        self.ops: dict[int, tuple[bool, RunningJob]] = {}
        self.epoch = books.state.release_epoch
        self.token: object = None
        self.open = False

    def release(self, r: RunningJob) -> None:
        self._record(False, r)
        self.books.release(r)

    def reserve(self, r: RunningJob) -> None:
        self._record(True, r)
        self.books.reserve(r)

    def _record(self, reserved: bool, r: RunningJob) -> None:
        if id(r) in self.ops:
            raise ValueError(f"job {r.request.id} was already changed in this statement")
        if not self.open:
            self.token, self.open = self.books.state.begin(), True
        self.ops[id(r)] = (reserved, r)

    def _close(self) -> None:
        if self.open:
            self.books.state.end(self.token)  # type: ignore[arg-type]
            self.token, self.open = None, False

    def undo(self, r: RunningJob) -> None:
        """Undo the change made to ``r`` alone (none made: nothing happens)."""
        op = self.ops.pop(id(r), None)
        if op is not None:
            (self.books.release if op[0] else self.books.reserve)(r)

    def discard(self) -> None:
        """Undo every change, last first."""
        books = self.books
        for reserved, r in reversed(list(self.ops.values())):
            (books.release if reserved else books.reserve)(r)
        self.ops.clear()
        books.state.release_epoch = self.epoch
        self._close()

    def commit(self) -> None:
        """Keep every change."""
        self.ops.clear()
        self._close()

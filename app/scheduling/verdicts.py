"""Typed verdicts and reasons: what a gate answers and why a job waits.

Every sentence the core writes for a person is a :class:`Reason`: a
``ReasonCode`` (a small fixed set, stable, what metrics, alerts, the API
and the dashboard group by), the message (free to reword) and the
``fields`` it was built from (team, pool, CU needed, ...). Code that needs
to know *why* reads ``reason.code`` and ``reason.fields``, never the words:
classifying sentences with regular expressions silently changed the
dashboards whenever a message was reworded, and labelled "free capacity is
held for job(s) ... (reservation ...)" as ``capacity``.

A ``Reason`` is also a ``str`` (its message), so everything that stores or
shows text (the ``reason`` column, events, the simulator's reports,
baselines that write plain sentences) keeps working unchanged. Extending a
message keeps its code: use :meth:`Reason.extend`, not ``+``.

A gate of the admission loop (:mod:`app.scheduling.gates`) answers with a
verdict, as Kueue's flavor assigner answers Fit / Preempt / NoFit
(kueue ``pkg/scheduler/flavorassigner/flavorassigner.go``, ``FlavorAssignmentMode``):

- :class:`Fit`: the gate lets the job through (with the placements once
  placement has run);
- :class:`NoFit`: the job waits (or, for ``NEVER_FITS``, can never run);
- :class:`Preempt`: the job does not fit as things are, but stopping
  lower-ranked work could make room: the cycle hands it to the one
  preemptor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Any

from app.scheduling.model import Admission, ReplicaPlacement


class ReasonCode(StrEnum):
    """Why a job waits, never runs, or was stopped. Values are stable (the API
    returns them as ``reason_code``); add codes, never rename them."""

    # a pending job left waiting by the core
    NEVER_FITS = "never_fits"  # no state of the full inventory could hold it
    CORDONED = "cordoned"  # fits the inventory but not its schedulable nodes
    ADMISSION_LIMIT = "admission_limit"  # the cycle's admission cap was reached
    TEAM_QUOTA = "team_quota"  # the team's total or per-type quota
    CAPACITY = "capacity"  # not enough free GPU blocks (of an allowed type) now
    HOST_RESOURCES = "host_resources"  # CPU/memory of one node, for a job without GPUs
    RESERVED = "reserved"  # only other jobs' reservations stand in the way
    RESERVATION = "reservation"  # the job holds a reservation and waits for it
    POOL_QUOTA = "pool_quota"  # the pool's guarantee, shared share and leases
    # a running job stopped by the core
    PREEMPTED = "preempted"  # by a higher-priority job
    PREEMPTED_FAIR_SHARE = "preempted_fair_share"  # by a same-priority job of another team
    RECLAIMED = "reclaimed"  # its expired lease was reclaimed
    MOVED = "moved"  # the descheduler moved it to make a whole node free
    # text from a policy that does not use codes (the simulator's baselines)
    OTHER = "other"


class Reason(str):
    """A message with its code and the fields it was built from (see module doc)."""

    code: ReasonCode
    fields: Mapping[str, Any]

    def __new__(
        cls, code: ReasonCode, message: str, fields: Mapping[str, Any] | None = None
    ) -> Reason:
        self = super().__new__(cls, message)
        self.code = code
        self.fields = MappingProxyType(dict(fields or {}))
        return self

    @property
    def message(self) -> str:
        return str.__str__(self)

    def prefix(self, head: str) -> Reason:
        """The same reason with ``head`` put in front of the message."""
        return Reason(self.code, head + self.message, self.fields)

    def extend(self, suffix: str, **fields: Any) -> Reason:
        """The same reason with ``suffix`` appended to the message (and ``fields`` added)."""
        if not suffix and not fields:
            return self
        return Reason(self.code, self.message + suffix, {**self.fields, **fields})

    def __reduce__(self) -> tuple[Any, ...]:  # pickle/copy keep code and fields
        return (Reason, (self.code, self.message, dict(self.fields)))

    def __repr__(self) -> str:
        return f"Reason({self.code.value}, {self.message!r})"


def code_of(reason: str | None) -> ReasonCode | None:
    """The code of a reason (``OTHER`` for plain text; None for no reason)."""
    if reason is None:
        return None
    return reason.code if isinstance(reason, Reason) else ReasonCode.OTHER


def stored_code(reason: str | None) -> str | None:
    """The value kept beside a reason's message (``jobs.reason_code``,
    ``job_events.reason_code``): its code, or None for text the core did not give."""
    return reason.code.value if isinstance(reason, Reason) else None


def from_stored(message: str | None, code: str | None) -> str | None:
    """A stored reason read back: a :class:`Reason` with its code when the code is one
    this release knows, else the message as plain text (its code unknown)."""
    if message is None or code is None or code not in _VALUES:
        return message
    return Reason(ReasonCode(code), message)


_VALUES = frozenset(c.value for c in ReasonCode)


@dataclass(frozen=True, slots=True)
class Fit:
    """The gate lets the job through; placement's gate fills ``placements``, the pool
    charge's gate the ``admission`` (with its leases)."""

    placements: tuple[ReplicaPlacement, ...] = ()
    admission: Admission | None = None


@dataclass(frozen=True, slots=True)
class NoFit:
    reason: Reason


@dataclass(frozen=True, slots=True)
class Preempt:
    """Does not fit now; stopping others might make room (the preemptor decides).
    ``reason`` None: the gate's reason costs more than the preemptor's pre-check, so
    it is written only if the preemptor finds nothing (placement's)."""

    reason: Reason | None


Verdict = Fit | NoFit | Preempt

FIT = Fit()

"""Job states and the rules of which change is allowed, as data (no SQL).

The one function that applies a state change to the database is
:func:`app.store.state_changes.change_state`; it reads these tables.
"""

from __future__ import annotations

from typing import Literal

JobStatus = Literal[
    "pending", "admitted", "running", "succeeded", "failed", "cancelled", "unschedulable"
]
STATUSES: tuple[str, ...] = (
    "pending",
    "admitted",
    "running",
    "succeeded",
    "failed",
    "cancelled",
    "unschedulable",
)
ACTIVE = frozenset({"admitted", "running"})  # holding capacity
TERMINAL = frozenset({"succeeded", "failed", "cancelled"})
CANCELLABLE = frozenset({"pending", "admitted", "running", "unschedulable"})

ALLOWED: dict[str, frozenset[str]] = {
    "pending": frozenset({"admitted", "cancelled", "unschedulable"}),
    # admitted -> pending: bind failed or preempted before it started
    "admitted": frozenset({"running", "pending", "succeeded", "failed", "cancelled"}),
    "running": frozenset({"pending", "succeeded", "failed", "cancelled"}),
    # unschedulable -> pending: the cluster grew (admin action)
    "unschedulable": frozenset({"pending", "cancelled"}),
    "succeeded": frozenset(),
    "failed": frozenset(),
    "cancelled": frozenset(),
}


class InvalidTransition(ValueError):
    """A state change the rules forbid (e.g. cancelling a finished job)."""


# What a change does, as data (app.store.state_changes turns it into one statement).

#: Timestamp columns a target status stamps with the time of the change, and
#: those it clears (a requeued job is neither admitted nor started any more).
STAMPS: dict[str, tuple[frozenset[str], frozenset[str]]] = {
    "pending": (frozenset(), frozenset({"admitted_at", "started_at"})),
    "admitted": (frozenset({"admitted_at"}), frozenset({"started_at"})),
    "running": (frozenset({"started_at"}), frozenset()),
    "unschedulable": (frozenset(), frozenset()),
    **{s: (frozenset({"finished_at"}), frozenset()) for s in TERMINAL},
}
STAMPED = ("admitted_at", "started_at", "finished_at")

#: Events of a requeue out of ACTIVE that count in ``preemption_count``
#: (a failed bind or lost Pods requeue too, but were not preempted).
PREEMPTION_EVENTS = frozenset({"preempted", "reclaimed"})

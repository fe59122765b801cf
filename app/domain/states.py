"""Job states and the rules of which change is allowed, as data (no SQL).

The one function that applies a state change to the database is
:func:`app.store.states.change_state`; it reads these tables.
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

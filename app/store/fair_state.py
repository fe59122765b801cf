"""The teams' deficits (the core's :class:`FairState`) kept in the database.

The deficit is what a team that waited is owed (app/scheduling/deficit.py): it
builds up over hours (``fair_horizon_s``), and it is what earns a big job of a
team short of its entitlement its reservation. Kept only in the dispatcher's
memory, a leader change (failover, upgrade, restart) set every team back to zero
credit, and the team that had waited hours started waiting again. The leader writes
the state in each pass's own transaction (fenced like every other write of the pass),
and a new leader reads it back before its first cycle; the core then decays it over
the gap (``now - at``), as it would have between two passes.

One ``settings`` row, ``{"at": epoch seconds, "deficit": {team: card-seconds}}``:
bounded by the teams that have work (a team with nothing to do drops out of the
state), whatever the history.
"""

from __future__ import annotations

import math
from typing import Any

from sqlalchemy import func
from sqlalchemy.dialects.postgresql import insert
from sqlalchemy.orm import Session

from app.scheduling.model import FairState
from app.store.orm import SettingRow

FAIR_KEY = "fair_deficit"


def to_value(fair: FairState) -> dict[str, Any]:
    return {"at": fair.at, "deficit": {t: float(d) for t, d in sorted(fair.deficit.items())}}


def from_value(value: Any) -> FairState | None:
    """The stored state, or None when the row is missing or not one (a first start,
    or a row written by hand): nobody is owed anything, as on a first cycle."""
    if not isinstance(value, dict):
        return None
    at, deficit = value.get("at"), value.get("deficit")
    if not isinstance(at, int | float) or not isinstance(deficit, dict):
        return None
    out = {str(t): float(d) for t, d in deficit.items()
           if isinstance(d, int | float) and math.isfinite(d) and d >= 0}
    return FairState(float(at), out)


def read_fair(session: Session) -> FairState | None:
    row = session.get(SettingRow, FAIR_KEY)
    return from_value(row.value) if row is not None else None


def write_fair(session: Session, fair: FairState) -> None:
    """Upsert the state in the caller's transaction (one row)."""
    value = to_value(fair)
    stmt = insert(SettingRow).values(key=FAIR_KEY, value=value)
    session.execute(stmt.on_conflict_do_update(
        index_elements=[SettingRow.key], set_={"value": value, "updated_at": func.now()},
    ))

"""Tuner state and history in the database, and weight changes through the store.

Kept in the ``settings`` key/value table (no table of its own): key
``tuning`` holds the config, the configured (base) weights and the last
evaluation; key ``tuning_history`` holds the recorded decisions (newest
last, capped). A change to GPU type weights updates ``gpu_types.weight``
and appends to the history in the caller's transaction: both or neither.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.domain.people import iso_utc
from app.store.orm import GpuTypeRow, SettingRow
from app.tuning.tuner import Decision, TunerConfig

STATE_KEY = "tuning"
HISTORY_KEY = "tuning_history"
HISTORY_CAP = 1000


def _row(session: Session, key: str, *, lock: bool = False) -> SettingRow | None:
    q = select(SettingRow).where(SettingRow.key == key)
    if lock:
        q = q.with_for_update()
    return session.scalar(q)


def _put(session: Session, key: str, value: dict[str, Any]) -> None:
    row = _row(session, key, lock=True)
    if row is None:
        session.add(SettingRow(key=key, value=value))
    else:
        row.value = value


def current_weights(session: Session) -> dict[str, float]:
    return {r.name: float(r.weight) for r in session.scalars(select(GpuTypeRow))}


def load_state(session: Session) -> dict[str, Any]:
    """``{"config": {...}, "base_weights": {...}, "last_decision": {...} | None}``.

    Base weights default to the current ones for types the tuner has not
    touched, so bounds are always relative to what was configured.
    """
    row = _row(session, STATE_KEY)
    value = dict(row.value) if row is not None else {}
    cfg = TunerConfig.from_dict(value.get("config"))
    weights = current_weights(session)
    base = {**weights, **{k: float(v) for k, v in (value.get("base_weights") or {}).items()}}
    base = {k: v for k, v in base.items() if k in weights}
    return {
        "config": cfg.to_dict(),
        "base_weights": base,
        "last_decision": value.get("last_decision"),
    }


def save_config(session: Session, cfg: TunerConfig) -> None:
    state = load_state(session)
    state["config"] = cfg.to_dict()
    _put(session, STATE_KEY, state)


def load_history(session: Session) -> list[dict[str, Any]]:
    row = _row(session, HISTORY_KEY)
    return list((row.value or {}).get("entries", [])) if row is not None else []


def record_decision(session: Session, decision: Decision) -> dict[str, Any]:
    """Remember the last evaluation; append recorded ones to the history; apply an ``applied``."""
    entry = decision.to_dict()
    entry["at_iso"] = iso_utc(decision.at)
    state = load_state(session)
    state["last_decision"] = entry
    if decision.action == "applied":
        rows = {r.name: r for r in session.scalars(select(GpuTypeRow).with_for_update())}
        for c in decision.changes:
            row = rows.get(c.gpu_type)
            if row is not None:
                state["base_weights"].setdefault(c.gpu_type, float(row.weight))
                row.weight = c.new
    _put(session, STATE_KEY, state)
    if decision.recorded:
        history = _row(session, HISTORY_KEY, lock=True)
        entries = list((history.value or {}).get("entries", [])) if history is not None else []
        entries.append(entry)
        value = {"entries": entries[-HISTORY_CAP:]}
        if history is None:
            session.add(SettingRow(key=HISTORY_KEY, value=value))
        else:
            history.value = value
    return entry

"""Cordon, uncordon and drain: an operator's state of a node, not its definition.

As ``kubectl cordon`` marks a node unschedulable without touching what the node
is, a cordon here is kept in its own column (``nodes.cordon``, migration 0010):
the config file, the API's node writes and the Kubernetes node sync rewrite a
node's definition and leave the cordon alone, so a node taken out for maintenance
stays out across ``gpuq config apply`` and a restart, whoever defined the node.

A cordoned node takes no new jobs; what runs there keeps running. A drain is a
cordon whose jobs are also stopped and requeued (with their submit time, as a
preemption) by the dispatcher's drainer step (app/dispatch/drain.py). Every change
is audited (kind ``node``, actions ``cordon``/``uncordon``/``drain``).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from app.store.audit import WriteBy
from app.store.orm import NodeRow

REASON_MAX = 200


def cordon_node(
    session: Session, row: NodeRow, by: WriteBy, reason: str | None = None, drain: bool = False
) -> bool:
    """Cordon (``drain``: and drain) ``row``; True when that changed anything. A
    drain of a cordoned node upgrades the cordon; a cordon of a draining node
    leaves the drain on (uncordon first to stop draining)."""
    old = row.cordon
    drain = drain or bool(old and old.get("drain"))
    reason = (reason or "").strip()[:REASON_MAX] or (old or {}).get("reason") or None
    if old is not None and bool(old.get("drain")) == drain and old.get("reason") == reason:
        return False
    new = {"by": by.actor, "at": by.at.isoformat(), "reason": reason, "drain": drain}
    row.cordon = new
    session.flush()
    by.record(session, "drain" if drain else "cordon", "node", row.name,
              {"cordon": old}, {"cordon": new})
    return True


def uncordon_node(session: Session, row: NodeRow, by: WriteBy) -> bool:
    """Lift the cordon (and stop draining); True when the node was cordoned."""
    if row.cordon is None:
        return False
    old = row.cordon
    row.cordon = None
    session.flush()
    by.record(session, "uncordon", "node", row.name, {"cordon": old}, {"cordon": None})
    return True


def draining_nodes(session: Session) -> set[str]:
    """Names of the nodes being drained (the nodes table is small: one scan)."""
    return set(session.scalars(
        select(NodeRow.name).where(NodeRow.cordon["drain"].as_boolean().is_(True))
    ))


def cordoned_nodes(session: Session) -> set[str]:
    return set(session.scalars(select(NodeRow.name).where(NodeRow.cordon.is_not(None))))


def cordon_view(row: NodeRow) -> dict[str, Any]:
    """What the node's API view adds: ``cordon`` as stored (or null) and ``schedulable``
    as the scheduler sees it (the definition's flag and no cordon)."""
    return {"schedulable": bool(row.schedulable) and row.cordon is None, "cordon": row.cordon}

"""Admin changes to a node never strand the jobs running on it.

A PATCH (or a config apply) that takes away the cards, MIG slices or GPU type a
running job holds would leave allocation rows naming devices the node no longer
has: every dispatcher pass then failed on them (``PATCH /v1/nodes/v100-1
{"gpus": 4}`` under an 8-card job stopped all scheduling with an ``IndexError``).
Such a change is refused with a 409 that names the jobs; the admin drains them
(cancel, or wait for them to finish) and applies it then. Changes that keep every
held device as it was (more cards, a new layout on a free card, labels, racks)
go through while jobs run.
"""

from __future__ import annotations

from sqlalchemy.orm import Session

from app.domain.config import NodeConfig
from app.domain.errors import Conflict
from app.store.live_allocations import held_allocations
from app.store.orm import AllocationRow


def _why_stranded(a: AllocationRow, new: NodeConfig, layouts: dict[int, list[str]]) -> str | None:
    """The field of ``new`` that no longer holds allocation ``a``, or None."""
    if a.gpu_type is not None and a.gpu_type != new.gpu_type:
        return "gpu_type"
    for dev, idx, profile in a.mig or []:
        if dev >= new.gpus:
            return "gpus"
        layout = layouts.get(dev, [])
        if idx >= len(layout) or layout[idx] != profile:
            return "mig_layout"
    if not a.mig:
        for dev in a.devices or []:
            if dev >= new.gpus:
                return "gpus"
            if layouts.get(dev):
                return "mig_layout"
    return None


def check_node_change(session: Session, new: NodeConfig) -> None:
    """409 when ``new`` would take away what a job on the node holds (running,
    admitted, or still releasing its cards)."""
    rows = session.scalars(
        held_allocations().where(AllocationRow.node == new.name).order_by(AllocationRow.job_id)
    ).all()
    if not rows:
        return
    layouts = new.mig_layouts() if new.gpus > 0 else {}
    stranded: dict[str, list[int]] = {}
    for a in rows:
        field = _why_stranded(a, new, layouts)
        if field is not None:
            jobs = stranded.setdefault(field, [])
            if a.job_id not in jobs:
                jobs.append(a.job_id)
    if not stranded:
        return
    field, jobs = next(iter(stranded.items()))
    more = f" and {len(jobs) - 10} more" if len(jobs) > 10 else ""
    shown = ", ".join(str(j) for j in jobs[:10]) + more
    raise Conflict(
        f"node {new.name!r}: this {field} change takes away cards or slices that "
        f"job(s) {shown} hold; drain them first (cancel them or let them finish), "
        "then apply the change",
        field,
    )

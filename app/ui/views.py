"""Read models of the Teams and Nodes pages: rows in, plain dicts out.

What a team token may not see (another team's job) is replaced by a
placeholder here, before any template runs.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from app.reports.live import live_fairness
from app.reports.window import WindowRecords
from app.scheduling.quota import QuotaLedger
from app.store import catalog
from app.store.orm import GpuTypeRow, JobRow, LeaseRow, NodeRow, TeamRow
from app.store.snapshot import read_catalog
from app.store.usage import node_allocations, node_view, team_usage

DAY_S = 86400.0

# taints Kubernetes' node lifecycle controller puts on a node it marks
CORDON_TAINTS = {"node.kubernetes.io/unschedulable"}
NOT_READY_TAINTS = {"node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable"}


def _borrowed_by_team(session: Session) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for team, gpu_type, units in session.execute(
        select(JobRow.team, LeaseRow.gpu_type, func.sum(LeaseRow.units))
        .join(JobRow, JobRow.id == LeaseRow.job_id)
        .where(LeaseRow.state == "active")
        .group_by(JobRow.team, LeaseRow.gpu_type)
    ):
        out[team][gpu_type] += float(units or 0)
    return out


def _lent_by_pool(session: Session) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for pool, gpu_type, units in session.execute(
        select(LeaseRow.lender, LeaseRow.gpu_type, func.sum(LeaseRow.units))
        .where(LeaseRow.state == "active")
        .group_by(LeaseRow.lender, LeaseRow.gpu_type)
    ):
        out[pool][gpu_type] += float(units or 0)
    return out


def capacity_by_type(session: Session) -> dict[str, float]:
    """CU of every card of each GPU type (cards x the type's CU per card)."""
    weight = dict(session.execute(select(GpuTypeRow.name, GpuTypeRow.weight)).all())
    out: dict[str, float] = defaultdict(float)
    for gpu_type, cards in session.execute(
        select(NodeRow.gpu_type, func.sum(NodeRow.gpus)).where(NodeRow.gpu_type.is_not(None))
        .group_by(NodeRow.gpu_type)
    ):
        if gpu_type is not None:  # excluded by the query; this narrows the column's type
            out[gpu_type] += float(cards or 0) * float(weight.get(gpu_type, 1.0))
    return dict(out)


def dominant(
    used_by_type: dict[str, float], capacity: dict[str, float]
) -> tuple[float, str | None]:
    """The team's dominant share (the largest fraction of any GPU type's capacity it
    holds, as in dominant resource fairness) and that type."""
    best, which = 0.0, None
    for t, cap in capacity.items():
        if cap > 0 and used_by_type.get(t, 0.0) / cap > best:
            best, which = used_by_type[t] / cap, t
    return best, which


def teams_view(
    session: Session,
    now: datetime,
    visible: Callable[[str], bool],
    window: WindowRecords | None = None,
) -> list[dict[str, Any]]:
    """One entry per visible team: quota and usage per GPU type, borrowing, fair-share
    position (the core's own dominant share) and the last day's wait percentiles."""
    rows = [r for r in catalog.list_named(session, TeamRow) if visible(r.name)]
    if not rows:
        return []
    ledger = QuotaLedger(read_catalog(session).teams)
    borrowed = _borrowed_by_team(session)
    lent = _lent_by_pool(session)
    report = live_fairness(session, now, DAY_S, window)
    waits = {g["key"]: g for g in report.get("groups", {}).get("team", [])}
    capacity = capacity_by_type(session)
    total_cu = sum(capacity.values())
    out = []
    for r in rows:
        usage = team_usage(session, r)
        ledger.team_total[r.name] = usage["used_units"]
        quota_by_type = usage["quota_by_type"]
        types = list(
            dict.fromkeys([*quota_by_type, *usage["used_by_type"], *borrowed.get(r.name, {})])
        )
        quota = usage["quota_units"]
        share, share_type = dominant(usage["used_by_type"], capacity)
        out.append(
            {
                "name": r.name,
                "pool": r.pool,
                "weight": r.weight,
                "quota_units": quota,
                "used_units": usage["used_units"],
                "quota_ratio": usage["used_units"] / quota if quota else None,
                "dominant_share": share,
                "dominant_type": share_type,
                "cluster_share": usage["used_units"] / total_cu if total_cu else None,
                "fair_key": ledger.dominant_share(r.name),
                "pending": usage["pending"],
                "running": usage["running"] + usage["admitted"],
                "wait_p50_s": waits.get(r.name, {}).get("wait_p50_s"),
                "wait_p99_s": waits.get(r.name, {}).get("wait_p99_s"),
                "types": [
                    {
                        "gpu_type": t,
                        "quota": quota_by_type.get(t),
                        "used": usage["used_by_type"].get(t, 0.0),
                        "borrowed": borrowed.get(r.name, {}).get(t, 0.0),
                        "lent": lent.get(r.pool, {}).get(t, 0.0),
                    }
                    for t in types
                ],
            }
        )
    return out


def _holder(alloc: dict[str, Any], jobs: dict[str, tuple[str, str]], visible) -> dict[str, Any]:
    name, team = jobs.get(alloc["job_id"], ("?", ""))
    shown = visible(team)
    return {
        "id": alloc["job_id"] if shown else None,
        "name": name if shown else None,
        "replica": alloc["replica"],
        "visible": shown,
        "share": alloc.get("share") or 0.0,
        "releasing": alloc["releasing"],
    }


def node_card(node: NodeRow, view: dict[str, Any], jobs, visible) -> dict[str, Any]:
    """A node as cards: who holds each device, its MIG slices and vGPU shares."""
    layout = {int(k): list(v) for k, v in (node.mig_layout or {}).items()}
    cards: dict[int, dict[str, Any]] = {
        d: {
            "device": d,
            "holders": [],
            "mig": [{"profile": p, "holder": None} for p in layout.get(d, [])],
            "releasing": False,
        }
        for d in range(node.gpus)
    }
    for a in view["allocations"]:
        h = _holder(a, jobs, visible)
        if a["mig"]:
            for d, i, _p in a["mig"]:
                card = cards.get(int(d))
                if card is not None and int(i) < len(card["mig"]):
                    card["mig"][int(i)]["holder"] = h
                    card["releasing"] |= h["releasing"]
        else:
            for d in a["devices"]:
                card = cards.get(int(d))
                if card is not None:
                    card["holders"].append(h)
                    card["releasing"] |= h["releasing"]
    taint_keys = {t.get("key") for t in node.taints or [] if isinstance(t, dict)}
    not_ready = bool(taint_keys & NOT_READY_TAINTS)
    return {
        **catalog.node_dict(node),
        "cards": [cards[d] for d in sorted(cards)],
        "cordoned": (bool(taint_keys & CORDON_TAINTS) or node.cordon is not None
                     or (not node.schedulable and not not_ready)),
        "cordon": node.cordon,
        "not_ready": not_ready,
        "releasing": any(a["releasing"] for a in view["allocations"]),
        "free_cpu": view["free"]["cpu"],
        "free_memory_gb": view["free"]["memory_gb"],
    }


def nodes_view(session: Session, visible: Callable[[str], bool]) -> list[dict[str, Any]]:
    allocs = node_allocations(session)
    ids = {a.job_id for rows in allocs.values() for a in rows}
    jobs: dict[str, tuple[str, str]] = {}
    if ids:
        jobs = {
            str(i): (n, t)
            for i, n, t in session.execute(
                select(JobRow.id, JobRow.name, JobRow.team).where(JobRow.id.in_(ids))
            )
        }
    return [
        node_card(r, node_view(r, allocs.get(r.name, [])), jobs, visible)
        for r in catalog.list_named(session, NodeRow)
    ]


def hide_others(items: Iterable[dict[str, Any]], visible) -> tuple[list[dict[str, Any]], int]:
    """Queue entries the viewer may see (positions unchanged) and how many were hidden."""
    shown, hidden = [], 0
    for q in items:
        if visible(q["team"]):
            shown.append(q)
        else:
            hidden += 1
    return shown, hidden

"""Submit-time feasibility against the database's catalog (nodes, types, pools).

The judgement is pure (:mod:`app.scheduling.feasibility`); this module gives it the
catalog as a Snapshot with nothing running. The snapshot is kept per database for a
few seconds and for one catalog revision (nodes are not in ``catalog_revision``): a
submit that it clears costs no read, and a refusal is confirmed on a fresh read
before it is given, so a node added a moment ago never causes a wrong 422 (a stale
view can at worst let through a job the dispatcher then marks ``unschedulable``,
which is what happened to every such job before).
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, Engine, exists, select
from sqlalchemy.orm import Session

from app.clock import to_epoch
from app.domain.devices import SHARE_UNSUPPORTED
from app.domain.errors import InputError
from app.domain.spec import JobSpec
from app.domain.spec_to_request import request_from_spec
from app.scheduling.feasibility import Refusal, submit_refusal
from app.scheduling.model import PriorityInfo, SchedulerConfig, Snapshot
from app.store.catalog_cache import CatalogView, TeamRef
from app.store.config_loader import scheduler_knobs
from app.store.node_rows import SOURCE as NODE_SYNC_SOURCE
from app.store.orm import NodeRow
from app.store.snapshot import read_catalog

KEEP_S = 10.0


@dataclass(frozen=True)
class _Kept:
    revision: int
    read_at: float
    snap: Snapshot
    kubernetes: bool = False  # the nodes come from Kubernetes (the node sync wrote them)


_cache: weakref.WeakKeyDictionary[Engine, _Kept] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def _read(conn: Connection, revision: int, now: datetime) -> _Kept:
    with Session(bind=conn) as s:
        cat = read_catalog(s)
        kube = bool(s.scalar(select(exists().where(NodeRow.source == NODE_SYNC_SOURCE))))
        knobs = scheduler_knobs(s)  # e.g. whether jobs without GPUs may use GPU nodes
    snap = cat.snapshot(now, [], [], SchedulerConfig.from_mapping(knobs))
    kept = _Kept(revision, to_epoch(now), snap, kube)
    with _lock:
        _cache[conn.engine] = kept
    return kept


def device_refusal(spec: JobSpec, kubernetes: bool) -> Refusal | None:
    """What the cluster's device layer can never give: a fraction of a card on
    Kubernetes nodes (no sharing device plugin gpuq drives: app/cluster/k8s_devices.py).
    Asked before placement, whose own answer ("no shareable card") would not say why."""
    if kubernetes and spec.resources.gpu_share is not None:
        return Refusal(SHARE_UNSUPPORTED, "", "resources.gpu_share")
    return None


def _judge(spec: JobSpec, snap: Snapshot, team: TeamRef, pool: str,
           priority: str) -> Refusal | None:
    prio = snap.priorities.get(priority) or PriorityInfo(priority, 0, True)
    info = snap.pools.get(pool)
    job = request_from_spec(spec, job_id="new", pool=pool, priority=prio, submitted_at=snap.now,
                            default_placement=info.placement if info else "binpack")
    return submit_refusal(job, snap, [team.pool, *team.allowed_pools])


def check_feasible(conn: Connection, spec: JobSpec, catalog: CatalogView, team: TeamRef,
                   pool: str, priority: str, now: datetime) -> None:
    """An :class:`InputError` (422) when no cluster state could ever run ``spec``, saying
    why and what to change; nothing when it could (it may still wait)."""
    with _lock:
        kept = _cache.get(conn.engine)
    t = to_epoch(now)
    fresh = kept is None or kept.revision != catalog.revision or not (
        0 <= t - kept.read_at <= KEEP_S)
    if fresh:
        kept = _read(conn, catalog.revision, now)
    assert kept is not None
    refused = device_refusal(spec, kept.kubernetes)
    if refused is not None:
        raise InputError(refused.detail, refused.field)
    snap = kept.snap
    if not snap.nodes:  # no inventory yet (discovery has not run): nothing to judge by
        return
    got = _judge(spec, snap, team, pool, priority)
    if got is not None and not fresh:  # confirm a refusal on what the database says now
        got = _judge(spec, _read(conn, catalog.revision, now).snap, team, pool, priority)
    if got is not None:
        raise InputError(got.detail, got.field)

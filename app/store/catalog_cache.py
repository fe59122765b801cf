"""What a submit checks a job against (teams, pools, priorities, GPU types),
cached per database and re-read only when ``catalog_revision`` moved.

A submit used to read a team, a pool, a priority class and every GPU type
(four round trips) before its one INSERT. The catalog changes rarely, so a
process keeps it in memory and asks one tiny question per submit: "is it
still revision N?" (``catalog_revision`` is bumped by statement triggers
in the writer's own transaction, migration 0002). The revision is read
before the tables, so a cache can only ever be older than its number says,
never newer - and an older one is replaced at the next look.
"""

from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Connection, Engine, select
from sqlalchemy.orm import Session

from app.store.orm import CatalogRevisionRow, GpuTypeRow, PoolRow, PriorityClassRow, TeamRow


@dataclass(frozen=True)
class TeamRef:
    name: str
    pool: str
    allowed_pools: tuple[str, ...]
    default_priority: str


@dataclass(frozen=True)
class NameRef:
    name: str


@dataclass(frozen=True)
class GpuTypeRef:
    name: str
    weight: float
    mig_profiles: dict[str, Any] = field(default_factory=dict)
    shareable: bool = False


@dataclass(frozen=True)
class CatalogView:
    revision: int
    teams: dict[str, TeamRef]
    pools: dict[str, NameRef]
    priorities: dict[str, NameRef]
    types: dict[str, GpuTypeRef]


_cache: weakref.WeakKeyDictionary[Engine, CatalogView] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def cached_catalog(engine: Engine) -> CatalogView | None:
    """The last catalog this process read for ``engine``, without asking the database.

    Only for writers that check the revision in the same statement that relies on
    it (``app.store.jobs.insert_job``: the INSERT happens only while
    ``catalog_revision`` still has this view's number)."""
    with _lock:
        return _cache.get(engine)


def current_catalog(session: Session) -> CatalogView:
    """The catalog as of this transaction's look at ``catalog_revision``."""
    return current_catalog_of(session.connection())


def current_catalog_of(conn: Connection) -> CatalogView:
    """:func:`current_catalog` on a connection (one round trip when the cache is current)."""
    engine = conn.engine
    rev = conn.scalar(select(CatalogRevisionRow.revision).where(CatalogRevisionRow.id == 1))
    with _lock:
        view = _cache.get(engine)
    if view is not None and rev is not None and view.revision == rev:
        return view
    t, p, g = TeamRow, PriorityClassRow, GpuTypeRow
    view = CatalogView(
        revision=rev if rev is not None else -1,
        teams={
            r.name: TeamRef(r.name, r.pool, tuple(r.allowed_pools or ()), r.default_priority)
            for r in conn.execute(select(t.name, t.pool, t.allowed_pools, t.default_priority))
        },
        pools={name: NameRef(name) for name in conn.scalars(select(PoolRow.name))},
        priorities={name: NameRef(name) for name in conn.scalars(select(p.name))},
        types={
            r.name: GpuTypeRef(r.name, r.weight, dict(r.mig_profiles or {}), r.shareable)
            for r in conn.execute(select(g.name, g.weight, g.mig_profiles, g.shareable))
        },
    )
    if rev is not None:
        with _lock:
            _cache[engine] = view
    return view

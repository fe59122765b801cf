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

from sqlalchemy import Engine, select
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


def current_catalog(session: Session) -> CatalogView:
    """The catalog as of this transaction's look at ``catalog_revision``."""
    engine = session.get_bind()
    assert isinstance(engine, Engine)
    rev = session.scalar(select(CatalogRevisionRow.revision).where(CatalogRevisionRow.id == 1))
    with _lock:
        view = _cache.get(engine)
    if view is not None and rev is not None and view.revision == rev:
        return view
    view = CatalogView(
        revision=rev if rev is not None else -1,
        teams={
            t.name: TeamRef(t.name, t.pool, tuple(t.allowed_pools or ()), t.default_priority)
            for t in session.scalars(select(TeamRow))
        },
        pools={p.name: NameRef(p.name) for p in session.scalars(select(PoolRow))},
        priorities={p.name: NameRef(p.name) for p in session.scalars(select(PriorityClassRow))},
        types={
            t.name: GpuTypeRef(t.name, t.weight, dict(t.mig_profiles or {}), t.shareable)
            for t in session.scalars(select(GpuTypeRow))
        },
    )
    if rev is not None:
        with _lock:
            _cache[engine] = view
    return view

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
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.domain.pod_policy import InstallPolicy, PodPolicy
from app.store.orm import CatalogRevisionRow, GpuTypeRow, PoolRow, PriorityClassRow, TeamRow


@dataclass(frozen=True)
class TeamRef:
    name: str
    pool: str
    allowed_pools: tuple[str, ...]
    default_priority: str
    namespaces: tuple[str, ...] = ()
    pod_security: str = "restricted"
    service_accounts: tuple[str, ...] = ("default",)
    automount_service_account_token: bool = False


@dataclass(frozen=True)
class NameRef:
    name: str


@dataclass(frozen=True)
class GpuTypeRef:
    name: str
    weight: float
    mig_profiles: dict[str, Any] = field(default_factory=dict)
    shareable: bool = False
    resource_name: str = "nvidia.com/gpu"


@dataclass(frozen=True)
class CatalogView:
    revision: int
    teams: dict[str, TeamRef]
    pools: dict[str, NameRef]
    priorities: dict[str, NameRef]
    types: dict[str, GpuTypeRef]

    def pod_policy(self, team: TeamRef, install: InstallPolicy) -> PodPolicy:
        """The rules ``team``'s Pod templates are checked against."""
        return PodPolicy(
            level=team.pod_security,
            namespaces=team.namespaces,
            service_accounts=team.service_accounts,
            automount_token=team.automount_service_account_token,
            install=install,
            gpu_resources=frozenset(t.resource_name for t in self.types.values()),
        )


def team_ref(t: TeamRow) -> TeamRef:
    return TeamRef(
        t.name,
        t.pool,
        tuple(t.allowed_pools or ()),
        t.default_priority,
        tuple(t.namespaces or ()),
        t.pod_security or "restricted",
        tuple(t.service_accounts if t.service_accounts is not None else ("default",)),
        bool(t.automount_service_account_token),
    )


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
        teams={t.name: team_ref(t) for t in session.scalars(select(TeamRow))},
        pools={p.name: NameRef(p.name) for p in session.scalars(select(PoolRow))},
        priorities={p.name: NameRef(p.name) for p in session.scalars(select(PriorityClassRow))},
        types={
            t.name: GpuTypeRef(
                t.name, t.weight, dict(t.mig_profiles or {}), t.shareable, t.resource_name
            )
            for t in session.scalars(select(GpuTypeRow))
        },
    )
    if rev is not None:
        with _lock:
            _cache[engine] = view
    return view


def pod_policy_reader(
    session_factory: sessionmaker[Session], install: InstallPolicy
) -> Callable[[str], PodPolicy | None]:
    """``team -> PodPolicy`` from the cached catalog, for the bind-time re-check
    (one tiny revision read per bind while the catalog is unchanged)."""

    def read(team: str) -> PodPolicy | None:
        with session_factory() as session:
            cat = current_catalog(session)
            ref = cat.teams.get(team)
            return cat.pod_policy(ref, install) if ref is not None else None

    return read

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

from sqlalchemy import Connection, Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.domain.errors import InputError, unknown
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
    max_pending: int | None = None  # None: the install's default
    submit_rate: float | None = None
    max_priority: str | None = None  # None: any priority class


@dataclass(frozen=True)
class NameRef:
    name: str


@dataclass(frozen=True)
class PriorityRef:
    name: str
    value: int = 0


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
    priorities: dict[str, PriorityRef]
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
            private_namespaces=self.private_namespaces(team.name, install.job_namespace),
        )

    def private_namespaces(self, team: str, default: str) -> frozenset[str]:
        """``team``'s namespaces that no other team may use (an empty list means the
        install's job namespace, shared by every team that has none of its own)."""
        def uses(t: TeamRef) -> tuple[str, ...]:
            return t.namespaces or (default,)

        others = {ns for t in self.teams.values() if t.name != team for ns in uses(t)}
        mine = self.teams.get(team)
        return frozenset(uses(mine)) - others if mine is not None else frozenset()


def refuse_unknown_filters(cat: CatalogView, team: str | None = None, pool: str | None = None,
                           priority: str | None = None) -> None:
    """A list filter naming a team, pool or priority class that does not exist is a 422
    with the valid names (an empty list read as "none of those" before, exit 0 in the CLI)."""
    for kind, name, known in (("team", team, cat.teams), ("pool", pool, cat.pools),
                              ("priority class", priority, cat.priorities)):
        if name is not None and name not in known:
            raise InputError(unknown(kind, name, known), kind.split()[0])


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
            r.name: TeamRef(
                r.name,
                r.pool,
                tuple(r.allowed_pools or ()),
                r.default_priority,
                tuple(r.namespaces or ()),
                r.pod_security or "restricted",
                tuple(r.service_accounts if r.service_accounts is not None else ("default",)),
                bool(r.automount_service_account_token),
                r.max_pending,
                r.submit_rate,
                r.max_priority,
            )
            for r in conn.execute(
                select(t.name, t.pool, t.allowed_pools, t.default_priority, t.namespaces,
                       t.pod_security, t.service_accounts, t.automount_service_account_token,
                       t.max_pending, t.submit_rate, t.max_priority)
            )
        },
        pools={name: NameRef(name) for name in conn.scalars(select(PoolRow.name))},
        priorities={r.name: PriorityRef(r.name, r.value)
                    for r in conn.execute(select(p.name, p.value))},
        types={
            r.name: GpuTypeRef(
                r.name, r.weight, dict(r.mig_profiles or {}), r.shareable, r.resource_name
            )
            for r in conn.execute(
                select(g.name, g.weight, g.mig_profiles, g.shareable, g.resource_name)
            )
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

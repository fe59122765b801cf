"""Team quota (and pool usage) in CU per GPU type: a small ledger.

Built once per cycle from what is running; every admission is committed
to it, so "team nlp at quota 200/200 CU" is decided in O(1) per job.
Usage changes only through the Book protocol (``reserve``/``release`` of a
job, :mod:`app.scheduling.books`), the same path as the cluster state's and
the pool ledger's, so a tentative change can never forget this book.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from app.scheduling.model import (
    JobRequest,
    PoolInfo,
    ReplicaPlacement,
    RunningJob,
    Snapshot,
    TeamInfo,
)
from app.scheduling.verdicts import Reason, ReasonCode

EPS = 1e-9


def units_by_type(placements: Iterable[ReplicaPlacement]) -> dict[str, float]:
    out: dict[str, float] = {}
    for p in placements:
        if p.gpu_type is not None and p.units:
            out[p.gpu_type] = out.get(p.gpu_type, 0.0) + p.units
    return out


class QuotaLedger:
    def __init__(
        self, teams: Mapping[str, TeamInfo], pools: Mapping[str, PoolInfo] | None = None
    ) -> None:
        self.teams = teams
        self.pools = pools or {}
        self.team_total: dict[str, float] = defaultdict(float)
        self.team_by_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.pool_by_type: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        self.version = 0  # bumped on every change, so callers may cache derived keys

    @classmethod
    def from_snapshot(cls, snap: Snapshot) -> QuotaLedger:
        ledger = cls(snap.teams, snap.pools)
        for r in snap.running:
            ledger.reserve(r)
        return ledger

    # -- questions ------------------------------------------------------------
    def check(self, job: JobRequest, by_type: Mapping[str, float]) -> Reason | None:
        """Why admitting ``by_type`` CU for ``job`` would break its team's quota, or None."""
        team = self.teams.get(job.team)
        if team is None:
            return None
        total = sum(by_type.values())
        used = self.team_total[job.team]
        if team.quota_units is not None and used + total > team.quota_units + EPS:
            return Reason(
                ReasonCode.TEAM_QUOTA,
                f"team {job.team} at quota {used:g}/{team.quota_units:g} CU "
                f"(job needs {total:g} CU)",
                {"team": job.team, "used": used, "quota": team.quota_units, "need": total},
            )
        for t, u in by_type.items():
            cap = team.quota_by_type.get(t)
            if cap is None:
                continue
            used_t = self.team_by_type[job.team][t]
            if used_t + u > cap + EPS:
                return Reason(
                    ReasonCode.TEAM_QUOTA,
                    f"team {job.team} at {t} quota {used_t:g}/{cap:g} CU "
                    f"(job needs {u:g} CU of {t})",
                    {"team": job.team, "gpu_type": t, "used": used_t, "quota": cap, "need": u},
                )
        return None

    def headroom(self, team: str) -> float | None:
        """CU the team may still take in total (None: no cap)."""
        info = self.teams.get(team)
        if info is None or info.quota_units is None:
            return None
        return info.quota_units - self.team_total[team]

    def dominant_share(self, team: str) -> float:
        """CU in use / team weight: the fair-share key (lowest goes first)."""
        return self.share_with(team, 0.0)

    def share_with(self, team: str, delta_units: float) -> float:
        """The team's dominant share if its CU in use changed by ``delta_units``."""
        info = self.teams.get(team)
        weight = info.weight if info is not None and info.weight > 0 else 1.0
        return (self.team_total[team] + delta_units) / weight

    def pool_below_guarantee(self, pool: str) -> bool:
        """True when the pool uses less than its guarantee for some type it is guaranteed."""
        info = self.pools.get(pool)
        if info is None or not info.guaranteed:
            return False
        used = self.pool_by_type[pool]
        return any(used[t] + EPS < g for t, g in info.guaranteed.items() if g > 0)

    # -- changes: the Book protocol (app/scheduling/books.py) ---------------
    def reserve(self, r: RunningJob) -> None:
        """Charge a job's CU to its team (and its pool's usage by type)."""
        self._add(r.request, units_by_type(r.placements), +1.0)

    def release(self, r: RunningJob) -> None:
        self._add(r.request, units_by_type(r.placements), -1.0)

    def _add(self, job: JobRequest, by_type: Mapping[str, float], sign: float) -> None:
        self.version += 1
        for t, u in by_type.items():
            self.team_total[job.team] += sign * u
            self.team_by_type[job.team][t] += sign * u
            self.pool_by_type[job.pool][t] += sign * u

"""Fairness report: wait and JCT percentiles per team, pool, priority and GPU type.

The article's test: jobs of equal weight should see similar wait
distributions, and P99 wait above 2 x P50 inside one group means
head-of-line blocking. So the report gives, for every group, the number
of jobs, wait P50 and P99, their ratio and JCT P50, and raises the
head-of-line alert from the same figures (see :mod:`app.reports.alerts`).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import asdict, dataclass

from app.domain.percentiles import percentile, percentile_of_sorted, ratio
from app.reports.alerts import AlertThresholds, head_of_line_alerts
from app.reports.records import JobRecord

DIMENSIONS = ("team", "pool", "priority", "gpu_type")


@dataclass(frozen=True, slots=True)
class GroupStats:
    dimension: str
    key: str
    jobs: int
    wait_samples: int
    wait_p50_s: float | None
    wait_p99_s: float | None
    p99_p50_ratio: float | None
    jct_samples: int
    jct_p50_s: float | None

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def group_stats(dimension: str, key: str, records: list[JobRecord]) -> GroupStats:
    waits = [r.wait_s for r in records if r.wait_s is not None]
    jcts = [j for j in (r.jct_s for r in records) if j is not None]
    p50 = percentile(waits, 50)
    p99 = percentile(waits, 99)
    return GroupStats(
        dimension=dimension,
        key=key,
        jobs=len(records),
        wait_samples=len(waits),
        wait_p50_s=p50,
        wait_p99_s=p99,
        p99_p50_ratio=ratio(p99, p50),
        jct_samples=len(jcts),
        jct_p50_s=percentile(jcts, 50),
    )


def in_window(records: Iterable[JobRecord], now: float, window_s: float | None) -> list[JobRecord]:
    """Records active in the last ``window_s`` seconds (all of them when None)."""
    if window_s is None:
        return list(records)
    since = now - window_s
    return [r for r in records if r.active_since(since)]


def group_by(records: Iterable[JobRecord], dimension: str) -> dict[str, list[JobRecord]]:
    out: dict[str, list[JobRecord]] = defaultdict(list)
    for r in records:
        out[str(getattr(r, dimension))].append(r)
    return dict(out)


def fairness_report(
    records: Iterable[JobRecord],
    *,
    now: float,
    window_s: float | None,
    thresholds: AlertThresholds | None = None,
) -> dict[str, object]:
    """The body of ``GET /v1/reports/fairness``: overall, per group, and alerts.

    The figures of :func:`group_stats` for every group, in one pass over the records
    (each wait and JCT taken once, each group's values sorted once): a one-day report
    covers ~10,000 jobs in five groupings."""
    th = thresholds or AlertThresholds()
    chosen = in_window(records, now, window_s)
    # records by their four labels at once (a few hundred combinations for thousands
    # of jobs), then each grouping merges the combinations: one dict lookup per record
    combos: dict[tuple[str, str, str, str], tuple[list[float], list[float], list[int]]] = {}
    for r in chosen:
        labels = (r.team, r.pool, r.priority, r.gpu_type)
        combo = combos.get(labels)
        if combo is None:
            combo = combos[labels] = ([], [], [0])
        combo[2][0] += 1
        wait, jct = r.wait_s, r.jct_s
        if wait is not None:
            combo[0].append(float(wait))
        if jct is not None:
            combo[1].append(float(jct))
    cells: dict[tuple[str, str], tuple[list[float], list[float], list[int]]] = {}
    for labels, (waits, jcts, n) in combos.items():
        for dim, key in zip((*DIMENSIONS, "all"), (*labels, "all"), strict=True):
            cell = cells.get((dim, str(key)))
            if cell is None:
                cell = cells[(dim, str(key))] = ([], [], [0])
            cell[0].extend(waits)
            cell[1].extend(jcts)
            cell[2][0] += n[0]
    groups: dict[str, list[dict[str, object]]] = {}
    all_stats: list[GroupStats] = []
    for dim in DIMENSIONS:
        keys = sorted(k for d, k in cells if d == dim)
        stats = [_stats(dim, k, *cells[(dim, k)]) for k in keys]
        all_stats.extend(stats)
        groups[dim] = [s.to_dict() for s in stats]
    overall = _stats("all", "all", *cells.get(("all", "all"), ([], [], [0])))
    return {
        "generated_at": now,
        "window_s": window_s,
        "overall": overall.to_dict(),
        "groups": groups,
        "alerts": [a.to_dict() for a in head_of_line_alerts(all_stats, th)],
    }


def _stats(dim: str, key: str, waits: list[float], jcts: list[float], n: list[int]) -> GroupStats:
    waits.sort()
    jcts.sort()
    p50 = percentile_of_sorted(waits, 50)
    p99 = percentile_of_sorted(waits, 99)
    return GroupStats(
        dimension=dim,
        key=key,
        jobs=n[0],
        wait_samples=len(waits),
        wait_p50_s=p50,
        wait_p99_s=p99,
        p99_p50_ratio=ratio(p99, p50),
        jct_samples=len(jcts),
        jct_p50_s=percentile_of_sorted(jcts, 50),
    )

"""Fairness and efficiency measures of a replay, the same for every policy.

* **slowdown** of a finished job: its JCT (submit to end, waits and restarts
  included) over its run time on the fastest GPU type its request allows
  (``runtime_s / max speed``): 1.0 means it started at once on the best card.
* **Jain's index** over the teams' mean slowdowns,
  ``(sum x)^2 / (n * sum x^2)``: 1.0 when every team is slowed down alike,
  1/n when one team takes all the slowdown.
* **restarts**: runs that ended without finishing (preempted, reclaimed,
  moved by the descheduler, failed out of memory); **thrown-away
  GPU-hours**: the GPU-hours those runs held (a restarted run starts over).
* **censored**: a job that did not succeed (failed, never schedulable, still
  waiting or running when the run ended) counts in JCT and slowdown with its
  time up to the end of the run (``horizon_s``): leaving it out made a policy
  that fails or strands jobs look faster. ``jobs_not_finished`` counts them.
* **worst team's P99 wait** is taken over teams with at least
  ``TAIL_MIN_JOBS`` (30) jobs only -- a P99 over 3-11 jobs is the team's
  maximum -- and the longest single wait is reported apart (``max_wait_s``).
* **max team slowdown**: the highest of the teams' mean slowdowns, beside
  Jain's index (Jain rises when the best-off team is hurt; the worst team's
  slowdown does not).
* GPUs are counted as cards (a vGPU share as its fraction, a MIG slice as
  its CU over the card's), the unit every baseline understands.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from app.domain.percentiles import percentile
from app.scheduling.model import gpus_held

__all__ = ["TAIL_MIN_JOBS", "gpus_held", "jain", "measures"]

TAIL_MIN_JOBS = 30  # a team's P99 wait is reported only over at least this many jobs


class JobFacts(Protocol):
    """What the measures read of a simulated job (``replay.SimJob``)."""

    submit_s: float
    end_s: float | None
    status: str
    wait_s: float
    ideal_runtime_s: float
    preemptions: int
    failures: int
    wasted_gpu_s: float
    used_gpu_s: float

    @property
    def team(self) -> str: ...


def jain(values: Sequence[float]) -> float | None:
    """Jain's fairness index of non-negative values; None without values."""
    if not values:
        return None
    s = sum(values)
    sq = sum(v * v for v in values)
    return (s * s) / (len(values) * sq) if sq > 0 else 1.0


def _mean(xs: Sequence[float]) -> float | None:
    return sum(xs) / len(xs) if xs else None


def _r(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


def measures(
    jobs: Iterable[JobFacts], horizon_s: float | None = None
) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(overall measures, per-team measures) to merge into the result's ``summary``.

    ``horizon_s``: the end of the run, where jobs that did not succeed are
    censored (default: the last end or submit time among ``jobs``).
    """
    jobs = list(jobs)
    if horizon_s is None:
        horizon_s = max(
            (t for j in jobs for t in (j.submit_s, j.end_s) if t is not None), default=0.0)
    not_finished = 0
    jct: list[float] = []
    slow: list[float] = []
    team_jct: dict[str, list[float]] = defaultdict(list)
    team_slow: dict[str, list[float]] = defaultdict(list)
    team_wait: dict[str, list[float]] = defaultdict(list)
    team_restarts: dict[str, int] = defaultdict(int)
    team_wasted: dict[str, float] = defaultdict(float)
    restarts = 0
    wasted = used = 0.0
    for j in jobs:
        team_wait[j.team].append(j.wait_s)
        r = j.preemptions + j.failures
        restarts += r
        team_restarts[j.team] += r
        wasted += j.wasted_gpu_s
        used += j.used_gpu_s
        team_wasted[j.team] += j.wasted_gpu_s
        if j.status == "succeeded" and j.end_s is not None:
            x = j.end_s - j.submit_s
        else:  # censored at the end of the run
            not_finished += 1
            x = max(0.0, horizon_s - j.submit_s)
        jct.append(x)
        team_jct[j.team].append(x)
        if j.ideal_runtime_s > 0:
            s = x / j.ideal_runtime_s
            slow.append(s)
            team_slow[j.team].append(s)
    team_means = {t: m for t, v in team_slow.items() if (m := _mean(v)) is not None}
    tails = [percentile(w, 99) or 0.0 for w in team_wait.values() if len(w) >= TAIL_MIN_JOBS]
    worst_p99 = max(tails) if tails else None
    overall = {
        "jct_mean_s": _r(_mean(jct)),
        "jct_p99_s": _r(percentile(jct, 99)),
        "slowdown_mean": _r(_mean(slow)),
        "jain_slowdown": _r(jain(list(team_means.values()))),
        "worst_team_wait_p99_s": _r(worst_p99),
        "max_wait_s": _r(max((max(w) for w in team_wait.values() if w), default=0.0)),
        "max_team_slowdown": _r(max(team_means.values(), default=None)),
        "jobs_not_finished": not_finished,
        "restarts": restarts,
        "gpu_hours_used": _r(used / 3600.0),
        "gpu_hours_thrown_away": _r(wasted / 3600.0),
        "thrown_away_pct": _r(100.0 * wasted / used) if used > 0 else 0.0,
    }
    per_team = {
        t: {
            "jct_mean_s": _r(_mean(team_jct.get(t, []))),
            "jct_p99_s": _r(percentile(team_jct.get(t, []), 99)),
            "slowdown_mean": _r(team_means.get(t)),
            "restarts": team_restarts[t],
            "gpu_hours_thrown_away": _r(team_wasted[t] / 3600.0),
        }
        for t in team_wait
    }
    return overall, per_team

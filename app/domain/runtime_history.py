"""Run-time predictions from each team's history of similar requests.

Within a team the core starts the shortest *predicted* job first and promotes a job
that has waited a multiple of its prediction (app/scheduling/ordering.py). The
prediction is the job's own ``duration_estimate_s`` when it has one; else this
module's: the typical run time of the team's earlier jobs of the same **request
class** (mode, size in powers of two, the GPU types it allows), once at least
:data:`MIN_RUNS` of them finished. No fallback to the team's other classes: a team's
8-card jobs are not predicted by its 1-card ones (a short prediction would let a long
job backfill held capacity).

The summary grows with what changes, never with history: one :class:`RunStats` per
(team, class) -- a count and the mean of the log run time over about the last
:data:`WINDOW` runs (a running mean up to :data:`WINDOW` runs, then exponentially
weighted, so a class whose jobs change is followed) -- updated when a job succeeds.
The prediction is the geometric mean, ``exp(mean_log)``: run times of one class
spread over orders of magnitude, and a few very long runs must not make every
short job of the class look long.

One implementation for both callers: the dispatcher keeps the summary in the
``runtime_history`` table (app/store/runtime_history_rows.py), the simulator in memory
(app/simulate/replay.py); both record a job's run when it succeeds and both hand
the core ``JobRequest.predicted_s`` (every baseline sees it too).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace

from app.scheduling.model import JobRequest

WINDOW = 20  # about the last 20 runs of a class count
MIN_RUNS = 3  # fewer runs: no prediction from them


@dataclass(frozen=True, slots=True)
class RunStats:
    runs: int = 0
    mean_log: float = 0.0

    def add(self, run_s: float) -> RunStats:
        """With one more run of ``run_s`` seconds (at least 1 s)."""
        n = self.runs + 1
        x = math.log(max(run_s, 1.0))
        return RunStats(n, self.mean_log + (x - self.mean_log) / min(n, WINDOW))

    @property
    def typical_s(self) -> float:
        return math.exp(self.mean_log)


def _size_class(cards: float) -> int:
    """Sizes in powers of two: 1, 2, 3-4, 5-8, ... cards (0 for a fraction of one)."""
    return 0 if cards <= 1.0 else math.ceil(math.log2(cards))


def request_class(job: JobRequest) -> str:
    """The job's shape: mode, total size (power-of-two class) and the types it allows."""
    mode = job.mode
    if mode == "gpus":
        size = f"{_size_class(float((job.gpus or 0) * job.replicas))}"
    elif mode == "gpu_units":
        size = f"u{_size_class(job.gpu_units or 0.0)}"
    elif mode == "mig":
        size = f"{job.mig}x{job.replicas}"
    else:
        size = f"{job.gpu_share or 0.0:g}x{job.replicas}"
    types = ",".join(sorted(job.gpu_types)) or "any"
    return f"{mode}:{size}:{types}"


def key(job: JobRequest) -> tuple[str, str]:
    """The (team, class) summary a finished run of ``job`` updates."""
    return job.team, request_class(job)


class RuntimeHistory:
    """The summary in memory: the simulator's, and the dispatcher's copy of the table."""

    def __init__(self, stats: Mapping[tuple[str, str], RunStats] | None = None) -> None:
        self.stats: dict[tuple[str, str], RunStats] = dict(stats or {})
        self._class: dict[str, str] = {}  # job id -> its class (a job's shape never changes)

    def record(self, job: JobRequest, run_s: float) -> None:
        """A run of ``job`` succeeded after ``run_s`` seconds."""
        k = key(job)
        self.stats[k] = self.stats.get(k, RunStats()).add(run_s)

    def predict(self, job: JobRequest) -> float | None:
        if job.duration_estimate_s is not None:
            return None  # the job's own estimate is the prediction
        cls = self._class.get(job.id)
        if cls is None:
            cls = self._class[job.id] = request_class(job)
        s = self.stats.get((job.team, cls))
        return s.typical_s if s is not None and s.runs >= MIN_RUNS else None

    def annotate(self, jobs: Iterable[JobRequest]) -> list[JobRequest]:
        """``jobs`` with ``predicted_s`` as the history says now (a job whose prediction
        did not change is the same object). The class cache keeps only jobs seen here once
        it grows past a few times their number (a long-lived dispatcher's)."""
        out = []
        for j in jobs:
            p = self.predict(j)
            out.append(j if p == j.predicted_s else replace(j, predicted_s=p))
        if len(self._class) > 4 * len(out) + 1000:
            seen = {j.id for j in out}
            self._class = {k: v for k, v in self._class.items() if k in seen}
        return out

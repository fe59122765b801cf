"""The streaming-team scenario of the fairness and starvation tests, defined once.

One 8-card A100 node; some teams each send a steady stream of small jobs that keeps the
node busy, and one job (any size that fits) waits among them. Used by
test_core_starvation.py (the wait bound under the defaults) and
test_core_entitlements.py (the deficit carried from cycle to cycle).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from app.domain.config import load_config_text
from app.simulate.replay import ScenarioModel


@dataclass(frozen=True)
class Stream:
    """``count`` jobs of ``gpus`` cards and ``run_s`` seconds (estimated exactly), one
    every ``every_s`` from ``offset_s``, named ``<prefix><i>``."""

    team: str
    count: int
    every_s: float
    run_s: float
    gpus: int = 1
    offset_s: float = 0.0
    prefix: str | None = None  # default: the team's name


@dataclass(frozen=True)
class Waiting:
    """The one job that waits among the streams; ``estimate``: its duration_estimate_s
    is its run time (else it has none)."""

    name: str
    team: str
    at_s: float
    run_s: float
    gpus: int
    estimate: bool = True


def stream_text(streams: Sequence[Stream], waiting: Waiting, *,
                teams: Sequence[str] | None = None, scheduler: str | None = None) -> str:
    """The scenario as config text (``scheduler``: a flow mapping for ``scheduler:``,
    else the defaults)."""
    names = list(teams) if teams is not None else list(
        dict.fromkeys([*(s.team for s in streams), waiting.team]))
    est = f" duration_estimate_s: {waiting.run_s}," if waiting.estimate else ""
    lines = [f"  - {{name: {waiting.name}, team: {waiting.team}, submit_at_s: {waiting.at_s},"
             f" runtime_s: {waiting.run_s},{est} resources: {{gpus: {waiting.gpus}}}}}"]
    for s in streams:
        prefix = s.prefix if s.prefix is not None else s.team
        lines += [
            f"  - {{name: {prefix}{i}, team: {s.team}, submit_at_s: {i * s.every_s + s.offset_s:g},"
            f" runtime_s: {s.run_s}, duration_estimate_s: {s.run_s},"
            f" resources: {{gpus: {s.gpus}}}}}"
            for i in range(s.count)
        ]
    sched = f"scheduler: {scheduler}\n" if scheduler else ""
    jobs = "\n".join(lines)
    return f"""
gpu_types: [{{name: a100-80g, memory_gb: 80, weight: 10}}]
nodes: [{{name: n, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}}]
pools: [{{name: p}}]
teams: [{", ".join(f"{{name: {t}, pool: p}}" for t in names)}]
{sched}jobs:
{jobs}
"""


def stream_model(streams: Sequence[Stream], waiting: Waiting, **kw) -> ScenarioModel:
    return ScenarioModel.from_config(load_config_text(stream_text(streams, waiting, **kw)))


def two_team_stream(count: int) -> ScenarioModel:
    """Team a: a 1-GPU 240 s job every 30 s (``count`` of them); team b: one 8-GPU 600 s
    job at 15 s -- the case where b's job once waited 72,225 s and was preempted 120
    times (test_core_starvation.py)."""
    return stream_model([Stream("a", count, 30, 240)], Waiting("big", "b", 15, 600, 8),
                        teams=["a", "b"])

"""The two alerts (docs/observability.md), as pure predicates over report figures.

- **Head-of-line blocking**: inside one group (a team, pool, priority or
  GPU type) P99 wait is above ``hol_ratio`` (2) x P50. Only groups with
  at least ``hol_min_samples`` waits count (two samples make no
  distribution), and P99 must exceed ``hol_min_p99_s`` so that "1 s vs
  3 s" does not page anyone. A P50 of zero uses the floor alone.
- **Type imbalance**: one GPU type has more than ``imbalance_queued``
  (10) jobs waiting for it while another type is more than
  ``imbalance_idle`` (40%) idle.

Both are exported as metrics too (``gpuq_alert_*``) and feed the tuner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from app.domain.config import AlertThresholds

__all__ = ["Alert", "AlertThresholds", "head_of_line_alerts", "type_imbalance_alerts"]


@dataclass(frozen=True, slots=True)
class Alert:
    type: str
    message: str
    figures: dict[str, Any] = field(default_factory=dict)
    dimension: str | None = None
    key: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class _WaitStats(Protocol):
    """Read-only (properties): a frozen dataclass such as GroupStats satisfies it."""

    @property
    def dimension(self) -> str: ...
    @property
    def key(self) -> str: ...
    @property
    def wait_samples(self) -> int: ...
    @property
    def wait_p50_s(self) -> float | None: ...
    @property
    def wait_p99_s(self) -> float | None: ...


def is_head_of_line(
    samples: int, p50: float | None, p99: float | None, th: AlertThresholds
) -> bool:
    if samples < th.hol_min_samples or p99 is None or p50 is None:
        return False
    if p99 <= th.hol_min_p99_s:
        return False
    return p99 > th.hol_ratio * p50


def head_of_line_alerts(stats: Iterable[_WaitStats], th: AlertThresholds) -> list[Alert]:
    out = []
    for s in stats:
        if not is_head_of_line(s.wait_samples, s.wait_p50_s, s.wait_p99_s, th):
            continue
        out.append(
            Alert(
                type="head_of_line",
                dimension=s.dimension,
                key=s.key,
                message=(
                    f"{s.dimension} {s.key}: wait P99 {s.wait_p99_s:.0f}s > "
                    f"{th.hol_ratio:g} x P50 {s.wait_p50_s:.0f}s over {s.wait_samples} jobs "
                    "(head-of-line blocking: consider more aggressive preemption)"
                ),
                figures={
                    "samples": s.wait_samples,
                    "wait_p50_s": s.wait_p50_s,
                    "wait_p99_s": s.wait_p99_s,
                    "ratio_threshold": th.hol_ratio,
                },
            )
        )
    return out


def type_imbalance_alerts(
    pending_by_type: Mapping[str, int],
    idle_ratio_by_type: Mapping[str, float],
    th: AlertThresholds,
) -> list[Alert]:
    """One alert per congested type, naming every other type that is idle enough."""
    out = []
    for gpu_type in sorted(pending_by_type):
        queued = pending_by_type[gpu_type]
        if queued <= th.imbalance_queued or gpu_type not in idle_ratio_by_type:
            continue
        idle = {
            t: r
            for t, r in sorted(idle_ratio_by_type.items())
            if t != gpu_type and r > th.imbalance_idle
        }
        if not idle:
            continue
        names = ", ".join(f"{t} {r:.0%} idle" for t, r in idle.items())
        out.append(
            Alert(
                type="type_imbalance",
                dimension="gpu_type",
                key=gpu_type,
                message=f"{gpu_type}: {queued} jobs queued while {names}",
                figures={
                    "queued": queued,
                    "idle_types": idle,
                    "queued_threshold": th.imbalance_queued,
                    "idle_threshold": th.imbalance_idle,
                },
            )
        )
    return out

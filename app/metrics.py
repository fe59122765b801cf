"""Prometheus objects (prefix ``gpuq_``), one registry per app instance.

Only the metric objects and small ``record_*`` helpers that translate
gpuq's plain data (report rows, cycle results) into samples live here;
the metrics loop (:mod:`app.dispatch.metrics_loop`) and the dispatcher call them.
A registry per :class:`GpuqMetrics` (not the global default) lets several
apps live in one test process without "duplicated timeseries" errors.

Families (all documented in README "Observability"):

- per GPU type: capacity/allocated CU, allocation ratio, free cards and
  MIG slices, real utilization from DCGM (absent when unknown, with
  ``gpuq_gpu_utilization_known`` saying so), tuner weight;
- queue: pending jobs by pool, priority, GPU type; wait and completion
  time histograms by pool, priority, team;
- dispatcher: scheduling attempts, failures by reason, preemptions and
  lease reclaims by reason, cycle time;
- leases: active leases and borrowed CU by borrower, lender, type;
- teams: CU in use per GPU type, quota caps (total and per type);
- alerts: head-of-line and type imbalance, 1 while firing.

:meth:`GpuqMetrics.render` with a team renders a team token's view: the
samples about that team and the cluster-wide ones, never another team's.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping

from prometheus_client import CONTENT_TYPE_LATEST as CONTENT_TYPE
from prometheus_client import (
    REGISTRY,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from app.reports.alerts import Alert
from app.reports.utilization import TypeUtilization
from app.scheduling.verdicts import ReasonCode, code_of

__all__ = ["CONTENT_TYPE", "REASON_LABELS", "GpuqMetrics", "reason_category", "sample_team"]

# waits and JCT span seconds to days
WAIT_BUCKETS = (1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 14400, 43200, 86400)
JCT_BUCKETS = (30, 60, 300, 600, 1800, 3600, 7200, 14400, 28800, 86400, 259200)
CYCLE_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)

# reason codes -> label values (labels must stay low-cardinality; several codes may share one)
REASON_LABELS: Mapping[ReasonCode, str] = {
    ReasonCode.NEVER_FITS: "unschedulable",
    ReasonCode.CORDONED: "cordoned",
    ReasonCode.ADMISSION_LIMIT: "admission_limit",
    ReasonCode.TEAM_QUOTA: "team_quota",
    ReasonCode.CAPACITY: "capacity",
    ReasonCode.HOST_RESOURCES: "host_resources",
    ReasonCode.RESERVED: "reservation",
    ReasonCode.RESERVATION: "reservation",
    ReasonCode.POOL_QUOTA: "pool_quota",
    ReasonCode.PREEMPTED: "priority",
    ReasonCode.PREEMPTED_FAIR_SHARE: "fair_share",
    ReasonCode.RECLAIMED: "lease_expired",
    ReasonCode.MOVED: "defragment",
    ReasonCode.OTHER: "other",
}


def reason_category(reason: str | None) -> str:
    """The label value of a reason: its code's (``other`` for a baseline's plain text,
    ``unknown`` for none). Read from the code, never the words."""
    code = code_of(reason)
    return "unknown" if code is None else REASON_LABELS[code]


def sample_team(labels: Mapping[str, str]) -> str | None:
    """The team a sample is about: its ``team`` label, or the ``key`` of a per-team
    alert (``gpuq_alert_head_of_line{dimension="team"}``); None for a cluster-wide
    sample (GPU types, pools, priorities, the dispatcher). No label names a job."""
    if "team" in labels:
        return labels["team"]
    if labels.get("dimension") == "team":
        return labels.get("key", "")
    return None


class _Families(Collector):
    """Already collected families, for :func:`generate_latest`."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> Iterable[Metric]:
        return self.families


class _ProcessWide(Collector):
    """The families of this process's Kubernetes backend (``gpuq_k8s_*``,
    app/cluster/k8s_metrics.py: process-wide objects on prometheus_client's default
    registry, as the backend is one per process) in the app's exposition. ``/metrics``
    renders the app's own registry only, so they were documented and never served."""

    PREFIX = "gpuq_k8s_"

    def describe(self) -> Iterable[Metric]:
        return []  # names come and go with the backend: nothing to reserve at register

    def collect(self) -> Iterable[Metric]:
        return [f for f in REGISTRY.collect() if f.name.startswith(self.PREFIX)]


class GpuqMetrics:
    """Every gpuq metric, registered on its own registry."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = self.registry = registry or CollectorRegistry(auto_describe=True)
        t = ["gpu_type"]
        self.capacity_units = Gauge(
            "gpuq_gpu_capacity_units", "CU of all cards of a GPU type", t, registry=r
        )
        self.allocated_units = Gauge(
            "gpuq_gpu_allocated_units", "CU held by admitted or running jobs", t, registry=r
        )
        self.allocation_ratio = Gauge(
            "gpuq_gpu_allocation_ratio", "allocated / capacity CU", t, registry=r
        )
        self.free_cards = Gauge(
            "gpuq_gpu_free_cards", "whole cards free on schedulable nodes", t, registry=r
        )
        self.free_slices = Gauge(
            "gpuq_gpu_free_slices", "MIG slices free on schedulable nodes", t, registry=r
        )
        self.gpu_utilization = Gauge(
            "gpuq_gpu_utilization_ratio",
            "mean DCGM_FI_DEV_GPU_UTIL / 100 (real use; absent when unknown)",
            t,
            registry=r,
        )
        self.gpu_utilization_known = Gauge(
            "gpuq_gpu_utilization_known",
            "1 when real GPU utilization comes from DCGM through Prometheus, else 0",
            registry=r,
        )
        self.tuner_weight = Gauge(
            "gpuq_tuner_weight", "current CU per card of a GPU type (tuned weight)", t, registry=r
        )
        self.pending_jobs = Gauge(
            "gpuq_pending_jobs",
            "jobs waiting, by pool, priority and the GPU type they wait for",
            ["pool", "priority", "gpu_type"],
            registry=r,
        )
        job_labels = ["pool", "priority", "team"]
        self.queue_wait = Histogram(
            "gpuq_queue_wait_seconds",
            "time a job spent pending before admission (across requeues)",
            job_labels,
            buckets=WAIT_BUCKETS,
            registry=r,
        )
        self.job_completion = Histogram(
            "gpuq_job_completion_seconds",
            "submit to successful finish (JCT)",
            job_labels,
            buckets=JCT_BUCKETS,
            registry=r,
        )
        self.scheduling_attempts = Counter(
            "gpuq_scheduling_attempts_total",
            "pending jobs considered by the dispatcher, by result",
            ["result"],
            registry=r,
        )
        self.scheduling_failures = Counter(
            "gpuq_scheduling_failures_total",
            "pending jobs left waiting after a cycle, by reason category",
            ["reason"],
            registry=r,
        )
        self.preemptions = Counter(
            "gpuq_preemptions_total", "jobs preempted, by reason", ["reason"], registry=r
        )
        self.lease_reclaims = Counter(
            "gpuq_lease_reclaims_total", "leases reclaimed, by reason", ["reason"], registry=r
        )
        self.releasing_units = Gauge(
            "gpuq_releasing_units",
            "CU of stopped jobs whose pods are still terminating (held, not yet free)",
            t,
            registry=r,
        )
        lease_labels = ["borrower", "lender", "gpu_type"]
        self.active_leases = Gauge(
            "gpuq_active_leases", "active borrow leases", lease_labels, registry=r
        )
        self.borrowed_units = Gauge(
            "gpuq_borrowed_units", "CU on loan under active leases", lease_labels, registry=r
        )
        self.cycle_seconds = Histogram(
            "gpuq_dispatcher_cycle_seconds",
            "one dispatcher cycle: snapshot, core, write, cluster calls",
            buckets=CYCLE_BUCKETS,
            registry=r,
        )
        self.alert_head_of_line = Gauge(
            "gpuq_alert_head_of_line",
            "1 while a group's wait P99 is above the ratio x P50",
            ["dimension", "key"],
            registry=r,
        )
        self.alert_type_imbalance = Gauge(
            "gpuq_alert_type_imbalance",
            "1 while a GPU type has too many queued jobs and another is idle",
            ["gpu_type"],
            registry=r,
        )
        self.team_usage_units = Gauge(
            "gpuq_team_usage_units",
            "CU a team's admitted or running jobs hold, by GPU type",
            ["team", "gpu_type"],
            registry=r,
        )
        self.team_quota_units = Gauge(
            "gpuq_team_quota_units",
            "a team's quota cap in CU (absent when the team has no cap)",
            ["team"],
            registry=r,
        )
        self.team_quota_type_units = Gauge(
            "gpuq_team_quota_type_units",
            "a team's quota cap in CU for one GPU type (only types with a cap)",
            ["team", "gpu_type"],
            registry=r,
        )
        self.metrics_pass_errors = Counter(
            "gpuq_metrics_pass_errors_total", "metrics loop passes that failed", registry=r
        )
        r.register(_ProcessWide())

    # -- exposition ----------------------------------------------------------------------------

    def render(self, team: str | None = None) -> bytes:
        """The exposition: every sample, or with ``team`` only the samples about that
        team (:func:`sample_team`) and the cluster-wide ones. Samples are filtered,
        not text lines, and a family left without a sample is left out (its HELP and
        TYPE too), so nothing tells a team which families other teams fill."""
        if team is None:
            return generate_latest(self.registry)
        kept = []
        for family in self.registry.collect():
            samples = [s for s in family.samples if sample_team(s.labels) in (None, team)]
            if samples:
                mine = copy.copy(family)
                mine.samples = samples
                kept.append(mine)
        view = CollectorRegistry(auto_describe=False)
        view.register(_Families(kept))
        return generate_latest(view)

    # -- gauges set from a fresh picture each pass (clear first: label sets come and go) --------

    def record_utilization(
        self, rows: Iterable[TypeUtilization], weights: Mapping[str, float]
    ) -> None:
        for g in (
            self.capacity_units,
            self.allocated_units,
            self.allocation_ratio,
            self.free_cards,
            self.free_slices,
            self.gpu_utilization,
            self.tuner_weight,
        ):
            g.clear()
        known = False
        for row in rows:
            t = row.gpu_type
            self.capacity_units.labels(t).set(row.capacity_cu)
            self.allocated_units.labels(t).set(row.allocated_cu)
            self.allocation_ratio.labels(t).set(row.allocation_ratio)
            self.free_cards.labels(t).set(row.free_cards)
            self.free_slices.labels(t).set(row.free_slices)
            if row.gpu_util is not None:
                known = True
                self.gpu_utilization.labels(t).set(row.gpu_util)
        for t, w in weights.items():
            self.tuner_weight.labels(t).set(w)
        self.gpu_utilization_known.set(1 if known else 0)

    def record_pending(self, counts: Mapping[tuple[str, str, str], int]) -> None:
        self.pending_jobs.clear()
        for (pool, priority, gpu_type), n in counts.items():
            self.pending_jobs.labels(pool, priority, gpu_type).set(n)

    def record_leases(
        self,
        counts: Mapping[tuple[str, str, str], int],
        units: Mapping[tuple[str, str, str], float],
    ) -> None:
        self.active_leases.clear()
        self.borrowed_units.clear()
        for key, n in counts.items():
            self.active_leases.labels(*key).set(n)
        for key, cu in units.items():
            self.borrowed_units.labels(*key).set(cu)

    def record_teams(
        self,
        usage: Mapping[tuple[str, str], float],
        quotas: Mapping[str, float | None],
        type_quotas: Mapping[tuple[str, str], float],
    ) -> None:
        """Per team: CU held by (team, GPU type), the total cap, and caps per type.

        Every team gets a usage sample per type it holds (0 for none held is left
        out); a team without a cap has no ``gpuq_team_quota_units`` sample."""
        for g in (self.team_usage_units, self.team_quota_units, self.team_quota_type_units):
            g.clear()
        for (team, gpu_type), cu in usage.items():
            self.team_usage_units.labels(team, gpu_type).set(cu)
        for team, cap in quotas.items():
            if cap is not None:
                self.team_quota_units.labels(team).set(cap)
        for (team, gpu_type), cap in type_quotas.items():
            self.team_quota_type_units.labels(team, gpu_type).set(cap)

    def record_releasing(self, units: Mapping[str, float]) -> None:
        self.releasing_units.clear()
        for gpu_type, cu in units.items():
            self.releasing_units.labels(gpu_type).set(cu)

    def record_alerts(self, alerts: Iterable[Alert]) -> None:
        self.alert_head_of_line.clear()
        self.alert_type_imbalance.clear()
        for a in alerts:
            if a.type == "head_of_line":
                self.alert_head_of_line.labels(a.dimension or "", a.key or "").set(1)
            elif a.type == "type_imbalance":
                self.alert_type_imbalance.labels(a.key or "").set(1)

    # -- events --------------------------------------------------------------------------------

    def observe_wait(self, pool: str, priority: str, team: str, wait_s: float) -> None:
        self.queue_wait.labels(pool, priority, team).observe(max(0.0, wait_s))

    def observe_completion(self, pool: str, priority: str, team: str, jct_s: float) -> None:
        self.job_completion.labels(pool, priority, team).observe(max(0.0, jct_s))

    def record_cycle(
        self,
        *,
        seconds: float,
        admitted: int,
        reasons: Mapping[str, str],
        unschedulable: Mapping[str, str] | None = None,
        preemptions: Iterable[tuple[str, str]] = (),
    ) -> None:
        """One dispatcher cycle: attempts, failure reasons, preemptions/reclaims, duration.

        ``preemptions`` are ``(kind, reason)`` pairs, kind ``preempt`` or ``reclaim``.
        """
        self.cycle_seconds.observe(max(0.0, seconds))
        if admitted:
            self.scheduling_attempts.labels("admitted").inc(admitted)
        if reasons:
            self.scheduling_attempts.labels("pending").inc(len(reasons))
        for reason in reasons.values():
            self.scheduling_failures.labels(reason_category(reason)).inc()
        never = len(unschedulable or {})
        if never:
            self.scheduling_attempts.labels("unschedulable").inc(never)
            self.scheduling_failures.labels("unschedulable").inc(never)
        for kind, reason in preemptions:
            self.record_stop(kind, reason)

    def record_stop(self, kind: str, reason: str | None) -> None:
        """One preemption (``kind`` preempt/preempted) or lease reclaim (reclaim/reclaimed),
        labelled by its reason's code (a reason read back from ``job_events`` is a
        :class:`Reason` through ``verdicts.from_stored``; text without a code is ``other``)."""
        target = self.lease_reclaims if kind.startswith("reclaim") else self.preemptions
        target.labels(reason_category(reason)).inc()

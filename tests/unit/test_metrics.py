"""Every metric family is exposed with the values the reports computed."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from app.metrics import GpuqMetrics, reason_category
from app.reports.alerts import Alert
from app.reports.utilization import borrowed_units, pending_counts, utilization
from app.scheduling.verdicts import Reason, ReasonCode
from tests.unit.test_reports_utilization import job, snapshot


def samples(m: GpuqMetrics) -> dict[tuple[str, tuple], float]:
    out = {}
    for fam in text_string_to_metric_families(m.render().decode()):
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metric_families_and_values():
    m = GpuqMetrics()
    snap = snapshot([job(10), job(11, gpu_types=("v100",))])
    m.record_utilization(utilization(snap), {"a100": 10, "v100": 4})
    m.record_pending(pending_counts(snap))
    m.record_leases({("inference", "training", "a100"): 1}, borrowed_units(snap))
    m.record_releasing({"a100": 20.0})
    m.observe_wait("training", "P1", "nlp", 30)
    m.observe_wait("training", "P1", "nlp", 90)
    m.observe_completion("training", "P1", "nlp", 700)
    m.record_cycle(
        seconds=0.02,
        admitted=3,
        reasons={"1": Reason(ReasonCode.TEAM_QUOTA, "team nlp at quota 200/200 CU"),
                 "2": Reason(ReasonCode.CAPACITY, "no free block")},
        unschedulable={"3": Reason(ReasonCode.NEVER_FITS, "no allowed GPU type has >= 100 GB")},
        preemptions=[("preempt", Reason(ReasonCode.PREEMPTED, "preempted by P0 job 9")),
                     ("reclaim", Reason(ReasonCode.RECLAIMED, "lease expired"))],
    )
    m.record_alerts(
        [
            Alert("head_of_line", "x", dimension="team", key="nlp"),
            Alert("type_imbalance", "y", dimension="gpu_type", key="a100"),
        ]
    )
    s = samples(m)
    a = (("gpu_type", "a100"),)
    assert s[("gpuq_gpu_capacity_units", a)] == 40
    assert s[("gpuq_gpu_allocated_units", a)] == pytest.approx(24.286)
    assert s[("gpuq_gpu_allocation_ratio", a)] == pytest.approx(24.286 / 40)
    assert s[("gpuq_gpu_free_cards", a)] == 1
    assert s[("gpuq_gpu_free_slices", a)] == 1
    assert s[("gpuq_tuner_weight", a)] == 10
    assert s[("gpuq_gpu_utilization_known", ())] == 0
    assert not any(k[0] == "gpuq_gpu_utilization_ratio" for k in s)  # unknown: not invented
    pend = (("gpu_type", "v100"), ("pool", "training"), ("priority", "P1"))
    assert s[("gpuq_pending_jobs", pend)] == 1
    lease = (("borrower", "inference"), ("gpu_type", "a100"), ("lender", "training"))
    assert s[("gpuq_active_leases", lease)] == 1
    assert s[("gpuq_borrowed_units", lease)] == 10
    assert s[("gpuq_releasing_units", a)] == 20
    jl = (("pool", "training"), ("priority", "P1"), ("team", "nlp"))
    assert s[("gpuq_queue_wait_seconds_count", jl)] == 2
    assert s[("gpuq_queue_wait_seconds_sum", jl)] == 120
    assert s[("gpuq_queue_wait_seconds_bucket", (("le", "60.0"), *jl))] == 1
    assert s[("gpuq_job_completion_seconds_sum", jl)] == 700
    assert s[("gpuq_scheduling_attempts_total", (("result", "admitted"),))] == 3
    assert s[("gpuq_scheduling_attempts_total", (("result", "pending"),))] == 2
    assert s[("gpuq_scheduling_failures_total", (("reason", "team_quota"),))] == 1
    assert s[("gpuq_scheduling_failures_total", (("reason", "capacity"),))] == 1
    assert s[("gpuq_scheduling_failures_total", (("reason", "unschedulable"),))] == 1
    assert s[("gpuq_preemptions_total", (("reason", "priority"),))] == 1
    assert s[("gpuq_lease_reclaims_total", (("reason", "lease_expired"),))] == 1
    assert s[("gpuq_dispatcher_cycle_seconds_count", ())] == 1
    assert s[("gpuq_alert_head_of_line", (("dimension", "team"), ("key", "nlp")))] == 1
    assert s[("gpuq_alert_type_imbalance", a)] == 1


def test_gauges_forget_label_sets_that_went_away():
    m = GpuqMetrics()
    m.record_pending({("training", "P1", "a100"): 3})
    m.record_pending({})
    assert not any(k[0] == "gpuq_pending_jobs" for k in samples(m))
    m.record_alerts([Alert("type_imbalance", "y", key="a100")])
    m.record_alerts([])
    assert not any(k[0] == "gpuq_alert_type_imbalance" for k in samples(m))


def test_utilization_known_when_dcgm_gives_numbers():
    m = GpuqMetrics()
    m.record_utilization(utilization(snapshot(), {"a100": 0.75}), {})
    s = samples(m)
    assert s[("gpuq_gpu_utilization_known", ())] == 1
    assert s[("gpuq_gpu_utilization_ratio", (("gpu_type", "a100"),))] == 0.75


def test_two_instances_do_not_collide():
    GpuqMetrics()
    GpuqMetrics()


def test_reason_categories():
    """Labels come from the code (real engine reasons: test_reason_codes.py); words do not
    matter, and plain text (a baseline's) is ``other``."""
    assert reason_category(Reason(ReasonCode.TEAM_QUOTA, "anything at all")) == "team_quota"
    assert reason_category(Reason(ReasonCode.RESERVED, "free capacity is held")) == "reservation"
    assert reason_category("team nlp at quota 200/200 CU") == "other"
    assert reason_category(None) == "unknown"
    assert reason_category(Reason(ReasonCode.RECLAIMED, "anything")) == "lease_expired"
    assert reason_category("lease 4 expired") == "other"

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


def _view(m: GpuqMetrics, team: str | None) -> tuple[set[str], dict[tuple[str, tuple], float]]:
    """(families, samples) of ``m.render(team)``, parsed as Prometheus parses it."""
    fams, out = set(), {}
    for fam in text_string_to_metric_families(m.render(team).decode()):
        fams.add(fam.name)
        for s in fam.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return fams, out


def test_a_team_view_keeps_its_own_and_the_cluster_wide_samples_only():
    """render(team) drops every sample about another team: a ``team`` label, or a
    head-of-line alert keyed by team; it keeps cluster-wide samples with their values,
    and leaves out families left without a sample (HELP/TYPE included). The old
    render had no team view: every tenant read every team's figures."""
    m = GpuqMetrics()
    snap = snapshot([job(10), job(11, gpu_types=("v100",))])
    m.record_utilization(utilization(snap), {"a100": 10})
    m.record_leases({("inference", "training", "a100"): 1}, {})
    m.observe_wait("training", "P1", "nlp", 30)
    m.observe_wait("inference", "P2", "cv", 90)
    m.observe_completion("inference", "P2", "cv", 700)  # cv only
    m.record_teams({("nlp", "a100"): 20.0, ("cv", "v100"): 4.0}, {"nlp": 100.0, "cv": None},
                   {("cv", "v100"): 8.0})
    m.record_alerts([
        Alert(type="head_of_line", message="", dimension="team", key="cv"),
        Alert(type="head_of_line", message="", dimension="team", key="nlp"),
        Alert(type="head_of_line", message="", dimension="pool", key="inference"),
    ])
    everything = samples(m)
    fams, nlp = _view(m, "nlp")
    assert not [k for k in nlp if ("team", "cv") in k[1] or ("key", "cv") in k[1]]
    assert nlp == {k: v for k, v in everything.items()
                   if dict(k[1]).get("team", "nlp") == "nlp"
                   and (dict(k[1]).get("dimension") != "team" or dict(k[1])["key"] == "nlp")}
    assert nlp[("gpuq_queue_wait_seconds_sum",
                (("pool", "training"), ("priority", "P1"), ("team", "nlp")))] == 30
    assert nlp[("gpuq_team_usage_units", (("gpu_type", "a100"), ("team", "nlp")))] == 20
    assert nlp[("gpuq_alert_head_of_line", (("dimension", "team"), ("key", "nlp")))] == 1
    assert nlp[("gpuq_alert_head_of_line", (("dimension", "pool"), ("key", "inference")))] == 1
    assert nlp[("gpuq_gpu_capacity_units", (("gpu_type", "a100"),))] == everything[
        ("gpuq_gpu_capacity_units", (("gpu_type", "a100"),))]
    assert ("gpuq_active_leases", (("borrower", "inference"), ("gpu_type", "a100"),
                                   ("lender", "training"))) in nlp  # pools are shared
    # cv's alone: nlp's view has neither its samples nor its HELP/TYPE lines
    assert "gpuq_job_completion_seconds" not in fams
    assert "gpuq_team_quota_type_units" not in fams
    assert "gpuq_job_completion_seconds" not in m.render("nlp").decode()
    _, cv = _view(m, "cv")
    assert not [k for k in cv if ("team", "nlp") in k[1] or ("key", "nlp") in k[1]]
    assert cv[("gpuq_team_quota_type_units", (("gpu_type", "v100"), ("team", "cv")))] == 8
    # a team with nothing of its own sees the cluster-wide samples only
    _, other = _view(m, "robotics")
    assert other == {k: v for k, v in everything.items()
                     if "team" not in dict(k[1]) and dict(k[1]).get("dimension") != "team"}
    assert m.render(None) == m.render()


def test_the_kubernetes_backends_families_are_served():
    """docs/operations.md lists gpuq_k8s_* on /metrics; they live on prometheus_client's
    default registry, which /metrics did not render, so none was ever served."""
    from app.cluster import k8s_metrics

    k8s_metrics.EVICTIONS.labels("eviction").inc()
    k8s_metrics.UNMATCHED_GPU_NODES.labels("NVIDIA-H200").set(2)
    m = GpuqMetrics()
    for text in (m.render(), m.render(team="nlp")):  # cluster-wide: every token sees them
        got = {(s.name, tuple(sorted(s.labels.items())))
               for fam in text_string_to_metric_families(text.decode())
               for s in fam.samples}
        assert ("gpuq_k8s_evictions_total", (("method", "eviction"),)) in got
        assert ("gpuq_k8s_unmatched_gpu_nodes", (("product", "NVIDIA-H200"),)) in got
    assert b"python_gc" not in m.render()  # the rest of the default registry stays out
    GpuqMetrics()  # a second app in the process registers the same view without a clash

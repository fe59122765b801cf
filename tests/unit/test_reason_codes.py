"""Every reason the engine writes carries a code the metrics know.

The reasons come from real cycles (random clusters and jobs, and one small
scenario per code), not from hand-written sentences: a metric label is read
from ``Reason.code``, so rewording a message cannot move a dashboard, and a
new code the metrics do not map fails here.
"""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.metrics import REASON_LABELS, reason_category
from app.scheduling.descheduler import deschedule
from app.scheduling.engine import schedule
from app.scheduling.model import (
    CycleResult,
    LeaseInfo,
    PoolInfo,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TeamInfo,
)
from app.scheduling.verdicts import Reason, ReasonCode
from tests.unit.core_fixtures import PRIOS, TYPES, job, node, running, snap, whole
from tests.unit.test_core_properties import POOLS, TEAMS, clusters, jobs


def codes(res: CycleResult) -> set[ReasonCode]:
    """The codes of every reason in ``res``, checking each is a known Reason."""
    out = set()
    texts = [*res.reasons.values(), *res.unschedulable.values(),
             *(p.reason for p in res.preemptions)]
    for why in texts:
        assert isinstance(why, Reason), f"plain text from the engine: {why!r}"
        assert why.code in REASON_LABELS, why.code
        assert reason_category(why) == REASON_LABELS[why.code]
        out.add(why.code)
    for job_id, why in res.unschedulable.items():
        assert why.code is ReasonCode.NEVER_FITS, (job_id, why)
    return out


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_reasons_of_random_cycles_have_known_codes(data) -> None:
    nodes = data.draw(clusters())
    pending = [data.draw(jobs(i)) for i in range(data.draw(st.integers(1, 12)))]
    cfg = SchedulerConfig(reservation_after_s=data.draw(st.sampled_from([0, 1e9])),
                          max_cycle_admissions=data.draw(st.sampled_from([1, 1000])))
    res = schedule(Snapshot(50.0, TYPES, nodes, POOLS, TEAMS, PRIOS, [], pending, cfg))
    codes(res)


def _cover() -> dict[ReasonCode, CycleResult]:
    """One small real cycle per code (what each one looks like to a user)."""
    a = [node("a0", "a100-80g", 4)]
    out: dict[ReasonCode, CycleResult] = {}
    out[ReasonCode.NEVER_FITS] = schedule(snap(a, [job("x", gpus=8)]))
    cordoned = [node("a0", "a100-80g", 4), node("a1", "a100-80g", 8)]
    cordoned[1].schedulable = False
    out[ReasonCode.CORDONED] = schedule(snap(cordoned, [job("x", gpus=8)]))
    out[ReasonCode.ADMISSION_LIMIT] = schedule(snap(
        a, [job("x"), job("y")], config=SchedulerConfig(max_cycle_admissions=1)))
    out[ReasonCode.TEAM_QUOTA] = schedule(snap(
        a, [job("x", gpus=2)], teams={"t": TeamInfo("t", "p", quota_units=10)}))
    busy = running(job("r", gpus=4, preemptible=False, priority="P0", priority_value=1000),
                   whole("a0", "a100-80g", (0, 1, 2, 3)))
    out[ReasonCode.CAPACITY] = schedule(snap(a, [job("x")], running=[busy]))
    cpu_busy = running(busy.request, whole("a0", "a100-80g", (0, 1, 2, 3), cpu=60))
    out[ReasonCode.HOST_RESOURCES] = schedule(snap(
        a, [job("x", gpus=0, cpu=10)], running=[cpu_busy],
        config=SchedulerConfig(cpu_jobs_on_gpu_nodes=True)))
    # an old job that gets a reservation, and a young one behind it told who holds the cards
    half = running(job("r", gpus=2, preemptible=False, priority="P0", priority_value=1000,
                       duration_estimate_s=100.0), whole("a0", "a100-80g", (0, 1)))
    out[ReasonCode.RESERVATION] = out[ReasonCode.RESERVED] = schedule(snap(
        a, [job("old", gpus=4, submitted_at=0.0), job("young", gpus=1, submitted_at=99_000.0)],
        running=[half], now=100_000.0))
    pools = {"p": PoolInfo("p", guaranteed={"a100-80g": 10}), "q": PoolInfo("q")}
    teams = {"t": TeamInfo("t", "p"), "u": TeamInfo("u", "q")}
    out[ReasonCode.POOL_QUOTA] = schedule(snap(
        a, [job("x", gpus=1, team="u", pool="q", preemptible=False)], pools=pools, teams=teams,
        running=[running(job("r", gpus=3, team="u", pool="q"),
                         whole("a0", "a100-80g", (0, 1, 2)))]))
    low = running(job("low", gpus=4, priority="P2", priority_value=100),
                  whole("a0", "a100-80g", (0, 1, 2, 3)))
    out[ReasonCode.PREEMPTED] = schedule(snap(
        a, [job("hi", gpus=4, priority="P0", priority_value=1000, preemptible=False)],
        running=[low], now=1000.0))
    lease = LeaseInfo("L1", "q", "p", "a100-80g", 10.0, "b", 0.0, 10.0)
    pools_l = {"p": PoolInfo("p", guaranteed={"a100-80g": 40}), "q": PoolInfo("q")}
    borrower = RunningJob(job("b", gpus=1, team="u", pool="q"),
                          (whole("a0", "a100-80g", (0,)),), 0.0, leases=(lease,))
    out[ReasonCode.RECLAIMED] = schedule(snap(
        a, [], running=[borrower], pools=pools_l, teams=teams, now=100.0))
    # team "small" below its share stops the youngest same-priority job of team "big"
    fills = [running(job(f"b{i}", team="big"), whole("a0", "a100-80g", (i,)),
                     started_at=10.0 * i) for i in range(4)]
    out[ReasonCode.PREEMPTED_FAIR_SHARE] = schedule(snap(
        a, [job("s", team="small", submitted_at=500.0)], running=fills, now=600.0,
        teams={"big": TeamInfo("big", "p"), "small": TeamInfo("small", "p")}))
    big = [node("a0", "a100-80g", 4), node("a1", "a100-80g", 4)]
    smalls = [running(job(f"s{i}", gpus=1), whole(f"a{i}", "a100-80g", (0,)), started_at=0.0)
              for i in range(2)]
    out[ReasonCode.MOVED] = deschedule(snap(
        big, [job("whole", gpus=4)], running=smalls, now=1000.0,
        config=SchedulerConfig(descheduler=True, defragment=True)))
    return out


def test_every_engine_code_is_produced_and_known() -> None:
    """Each code above is what its scenario really produces, and every code the core
    writes (all but ``OTHER``, which only baselines' plain text gets) is covered."""
    cover = _cover()
    for code, res in cover.items():
        assert code in codes(res), (code, res)
    produced_by_core = set(ReasonCode) - {ReasonCode.OTHER}
    assert produced_by_core <= set(cover)


def test_reason_keeps_code_through_edits_and_pickle() -> None:
    import pickle

    r = Reason(ReasonCode.CAPACITY, "needs 4 x a100", {"pool": "p"})
    assert r == "needs 4 x a100" and isinstance(r, str)
    e = r.extend("; later", why="x")
    assert e.code is ReasonCode.CAPACITY and e.fields == {"pool": "p", "why": "x"}
    back = pickle.loads(pickle.dumps(r))
    assert back.code is ReasonCode.CAPACITY and back.fields == {"pool": "p"}
    assert reason_category("plain text of a baseline") == "other"
    assert reason_category(None) == "unknown"

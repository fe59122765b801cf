"""The cycle's books (cluster state, team ledger, pool ledger) change together, and a
statement's tentative changes are kept or undone as one (app/scheduling/books.py)."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.scheduling.books import Books
from app.scheduling.engine import schedule
from app.scheduling.model import LeaseInfo, PoolInfo, RunningJob, TeamInfo
from app.scheduling.pools import PoolLedger
from app.scheduling.quota import QuotaLedger
from app.scheduling.state import ClusterState
from app.scheduling.verdicts import ReasonCode, code_of
from tests.unit.core_fixtures import job, node, running, snap, whole

NODES = [node("a0", "a100-80g", 8), node("a1", "a100-80g", 8)]


def books_of(s) -> Books:
    return Books(ClusterState.from_snapshot(s), QuotaLedger.from_snapshot(s),
                 PoolLedger.from_snapshot(s))


def picture(b: Books) -> tuple:
    """Everything the three books hold, comparable."""
    state = tuple(
        (n.name, n.cpu_used, n.memory_used_gb, tuple(d.whole_used for d in n.devices))
        for n in sorted(b.state.nodes.values(), key=lambda n: n.name)
    )
    quota = (dict(b.quota.team_total),
             {t: dict(v) for t, v in b.quota.team_by_type.items()},
             {p: dict(v) for p, v in b.quota.pool_by_type.items()})
    pools = (dict(b.pools.used), dict(b.pools.borrowed), dict(b.pools.lent),
             sorted(b.pools.jobs))
    return state, quota, pools


def test_a_team_at_its_quota_preempts_its_own_lower_priority_work() -> None:
    """Team t (quota 80 CU = 8 A100 cards) runs 8 one-card P2 jobs; its P0 job of 2 cards
    finds free cards on a1 but the quota full. It stops two of its own P2 jobs (Kueue's
    withinClusterQueue: LowerPriority). The what-if used to release the victims from the
    cluster state and the pool ledger but not from the team ledger, and the quota check
    came before any preemption, so the P0 job waited behind its own P2 work forever."""
    lows = [job(f"low{i}", priority="P2", priority_value=100) for i in range(8)]
    run = [running(j, whole("a0", "a100-80g", (i,)), started_at=0.0)
           for i, j in enumerate(lows)]
    p0 = job("urgent", priority="P0", priority_value=1000, preemptible=False, gpus=2,
             submitted_at=500.0)
    s = snap(NODES, [p0], running=run, now=1000.0,
             teams={"t": TeamInfo("t", "p", quota_units=80)})
    res = schedule(s)
    assert [a.job_id for a in res.admissions] == ["urgent"]
    victims = sorted(p.job_id for p in res.preemptions)
    assert len(victims) == 2 and set(victims) <= {j.id for j in lows}
    assert all(code_of(p.reason) is ReasonCode.PREEMPTED for p in res.preemptions)


def test_in_team_preemption_needs_a_lower_priority() -> None:
    """Same priority: the team's own work is not preempted for quota; the job waits
    with the team-quota reason."""
    mates = [job(f"m{i}") for i in range(8)]
    run = [running(j, whole("a0", "a100-80g", (i,)), started_at=0.0)
           for i, j in enumerate(mates)]
    s = snap(NODES, [job("x", submitted_at=500.0)], running=run, now=1000.0,
             teams={"t": TeamInfo("t", "p", quota_units=80)})
    res = schedule(s)
    assert not res.admissions and not res.preemptions
    assert code_of(res.reasons["x"]) is ReasonCode.TEAM_QUOTA


def test_above_the_whole_quota_never_preempts() -> None:
    lows = [job(f"low{i}", priority="P2", priority_value=100) for i in range(2)]
    run = [running(j, whole("a0", "a100-80g", (i,))) for i, j in enumerate(lows)]
    big = job("big", priority="P0", priority_value=1000, preemptible=False, gpus=8,
              gpu_types=("a100-80g",))
    s = snap(NODES, [big], running=run, now=1000.0,
             teams={"t": TeamInfo("t", "p", quota_units=40)})
    res = schedule(s)
    assert not res.preemptions and not res.admissions
    assert res.reasons["big"].fields["above_quota"]  # type: ignore[attr-defined]


def _leased_snapshot(n: int):
    pools = {"p": PoolInfo("p", guaranteed={"a100-80g": 80}),
             "q": PoolInfo("q", guaranteed={"a100-80g": 80})}
    teams = {"t": TeamInfo("t", "p", quota_units=200), "u": TeamInfo("u", "q")}
    run: list[RunningJob] = []
    for i in range(n):
        team, pool = ("t", "p") if i % 2 else ("u", "q")
        j = job(f"r{i}", team=team, pool=pool, gpus=1, priority="P2", priority_value=100)
        leases = (LeaseInfo(f"L{i}", "p", "q", "a100-80g", 10, j.id, 0, 1800),) if i == 1 else ()
        run.append(RunningJob(j, (whole(f"a{i // 8}", "a100-80g", (i % 8,)),), 0.0, leases))
    return snap(NODES, [], running=run, pools=pools, teams=teams, now=100.0)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(n=st.integers(1, 16), data=st.data())
def test_discard_restores_every_book(n, data) -> None:
    s = _leased_snapshot(n)
    b = books_of(s)
    before = picture(b)
    epoch = b.state.release_epoch
    stmt = b.statement()
    chosen = data.draw(st.lists(st.sampled_from(s.running), unique_by=lambda r: r.request.id))
    for r in chosen:
        stmt.release(r)
    if chosen:
        assert picture(b) != before
    undone = data.draw(st.lists(st.sampled_from(chosen), unique_by=lambda r: r.request.id)
                       if chosen else st.just([]))
    for r in undone:
        stmt.undo(r)
    stmt.discard()
    assert picture(b) == before
    assert b.state.release_epoch == epoch  # a discard is not a release


def test_commit_keeps_and_release_reaches_every_book() -> None:
    s = _leased_snapshot(4)
    b = books_of(s)
    r = s.running[1]  # team t, pool p, holding a lease from q
    stmt = b.statement()
    stmt.release(r)
    stmt.commit()
    assert b.quota.team_total["t"] == 10  # r3 is left
    assert "r1" not in b.pools.jobs and b.pools.lent[("q", "a100-80g")] == 0
    assert not b.state.nodes["a0"].devices[1].whole_used
    stmt.discard()  # nothing left to undo
    assert b.quota.team_total["t"] == 10

"""Fair-share preemption (``fair_preemption``, app/scheduling/fair_share.py): a team
below its entitlement may stop a same-priority job of a team that stays at or above its
own after the removal, cheaply (the victims' lost GPU-hours are bounded), never back and
forth, never across pools."""

from __future__ import annotations

from app.scheduling.engine import schedule
from app.scheduling.model import PoolInfo, RunningJob, SchedulerConfig, TeamInfo
from tests.unit.core_fixtures import job, node, running, snap, whole

NODES = [node("a", "a100-80g", 4)]
TEAMS = {"big": TeamInfo("big", "p"), "small": TeamInfo("small", "p")}
HOUR = 3600.0


def _big_fills_the_node(started_at: float = 0.0, team: str = "big") -> list:
    """Four 1-card jobs of one team on the only node; ``b3`` is the youngest."""
    return [
        running(job(f"b{i}", team=team, submitted_at=0.0), whole("a", "a100-80g", (i,)),
                started_at=started_at + 10.0 * i)
        for i in range(4)
    ]


def _run(pending, run, now, teams=TEAMS, **cfg):
    return schedule(snap(NODES, pending, running=run, teams=teams, now=now,
                         config=SchedulerConfig(**cfg)))


def test_team_below_its_share_stops_the_youngest_job_of_the_team_above() -> None:
    res = _run([job("s", team="small", submitted_at=500.0)], _big_fills_the_node(), now=600.0)
    (p,) = res.preemptions
    assert p.job_id == "b3" and p.by_job == "s"  # the cheapest: it started last
    assert "fair share" in p.reason and "big" in p.reason and "small" in p.reason
    assert [a.job_id for a in res.admissions] == ["s"]


def test_no_fair_preemption_when_turned_off_or_the_victims_would_lose_too_much() -> None:
    pend = [job("s", team="small", submitted_at=500.0)]
    assert not _run(pend, _big_fills_the_node(), now=600.0, fair_preemption=False).preemptions
    # each running job has run 3 h on 1 card: 3 GPU-hours each, over a budget of 2
    old = _run(pend, _big_fills_the_node(), now=3 * HOUR + 40,
               fair_preemption_max_lost_gpu_h=2.0)
    assert not old.preemptions and not old.admissions
    # 0 = no limit
    unlimited = _run(pend, _big_fills_the_node(), now=3 * HOUR + 40,
                     fair_preemption_max_lost_gpu_h=0.0)
    assert [p.job_id for p in unlimited.preemptions] == ["b3"]


def test_minimum_run_time_and_thrash_guard_apply() -> None:
    pend = [job("s", team="small", submitted_at=0.0)]
    # every job of team big started less than min_run_time_s (60 s) ago
    assert not _run(pend, _big_fills_the_node(started_at=10.0), now=60.0).preemptions
    # b3 preempted s a moment ago: s may not take its place back (b2 goes instead)
    back = job("s", team="small", last_preempted_by="b3", last_preempted_at=550.0)
    res = _run([back], _big_fills_the_node(), now=600.0)
    assert [p.job_id for p in res.preemptions] == ["b2"]


def test_a_team_at_its_share_is_no_victim_and_a_team_above_its_share_takes_nothing() -> None:
    # two teams with two cards each: both at their fair share (4 cards / 2 teams)
    run = _big_fills_the_node()
    run = [*run[:2], *(running(job(f"m{i}", team="small"), whole("a", "a100-80g", (i + 2,)),
                               started_at=100.0) for i in range(2))]
    more = job("s", team="small", submitted_at=500.0)
    assert not _run([more], run, now=600.0).preemptions  # small would go above its share
    # a third team arrives wanting one card: entitlements 1.5, 1.5, 1; big and small hold 2
    # each, but either would drop to 1 < 1.5 without a card: nobody is taken from (the
    # after-removal check), the new team waits for a job to end
    teams = {**TEAMS, "new": TeamInfo("new", "p")}
    res = _run([job("n", team="new", submitted_at=500.0)], run, now=600.0, teams=teams)
    assert not res.preemptions
    # weights 3:1:1: big is entitled to the 2 cards it holds, small to 1 (holds 2): the
    # victim is small's, which keeps its entitlement after the removal
    weighted = {"big": TeamInfo("big", "p", weight=3.0), "small": TeamInfo("small", "p"),
                "new": TeamInfo("new", "p")}
    res = _run([job("n", team="new", submitted_at=500.0)], run, now=600.0, teams=weighted)
    assert [p.job_id for p in res.preemptions] in (["m0"], ["m1"])


def test_no_back_and_forth() -> None:
    """After the swap, the victim's team (still above its share) cannot take the card back."""
    run = _big_fills_the_node()
    res = _run([job("s", team="small", submitted_at=500.0)], run, now=600.0)
    (p,) = res.preemptions
    (adm,) = res.admissions
    after = [r for r in run if r.request.id != p.job_id]
    after.append(running(job("s", team="small"), *adm.placements, started_at=600.0))
    requeued = job(p.job_id, team="big", submitted_at=0.0, last_preempted_by="s",
                   last_preempted_at=600.0)
    for now in (700.0, 2000.0, 5000.0):  # past the thrash window too
        assert not _run([requeued], after, now=now).preemptions


def test_victims_only_in_the_preemptors_pool_and_never_non_preemptible() -> None:
    pools = {"p": PoolInfo("p"), "q": PoolInfo("q")}
    teams = {"big": TeamInfo("big", "q"), "small": TeamInfo("small", "p")}
    run = [
        running(job(f"b{i}", team="big", pool="q"), whole("a", "a100-80g", (i,)), started_at=0.0)
        for i in range(4)
    ]
    res = schedule(snap(NODES, [job("s", team="small", submitted_at=500.0)], running=run,
                        teams=teams, pools=pools, now=600.0))
    assert not res.preemptions
    p0 = [
        running(job(f"b{i}", team="big", priority="P0", priority_value=1000, preemptible=False),
                whole("a", "a100-80g", (i,)), started_at=0.0)
        for i in range(4)
    ]
    s0 = job("s", team="small", priority="P0", priority_value=1000, preemptible=False,
             submitted_at=500.0)
    assert not _run([s0], p0, now=600.0).preemptions


def test_reclaim_of_a_type_share() -> None:
    """A team within its fair share of V100s takes a card from a team above its V100 share,
    even when that team is below its share of the whole cluster (Kueue's reclaim of
    nominal quota per flavor)."""
    nodes = [node("v", "v100-16g", 4), node("a", "a100-80g", 4)]
    # team big: 4 V100 (16 CU) + nothing else; team small: 4 A100 (40 CU)
    run = [running(job(f"b{i}", team="big", gpu_types=("v100-16g",)),
                   whole("v", "v100-16g", (i,)), started_at=10.0 * i) for i in range(4)]
    run += [running(job(f"a{i}", team="small", gpu_types=("a100-80g",)),
                    whole("a", "a100-80g", (i,)), started_at=0.0) for i in range(4)]
    want = job("s", team="small", gpu_types=("v100-16g",), submitted_at=500.0)
    res = schedule(snap(nodes, [want], running=run, teams=TEAMS, now=600.0))
    (p,) = res.preemptions
    assert p.job_id == "b3" and "fair share" in p.reason


# -- property: random teams on one pool, a virtual clock ---------------------------------

from hypothesis import HealthCheck, event, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from app.scheduling.entitlements import (  # noqa: E402
    at_least,
    entitlements,
    held_throughput,
    within,
)
from app.scheduling.model import gpus_held  # noqa: E402
from app.scheduling.quota import QuotaLedger, units_by_type  # noqa: E402
from app.scheduling.state import ClusterState, device_overcommitted  # noqa: E402
from tests.unit.quota_sim import PRIO, Sim  # noqa: E402
from tests.unit.quota_sim import job as qjob  # noqa: E402
from tests.unit.quota_sim import node as qnode  # noqa: E402

TEAM_NAMES = ["t0", "t1", "t2", "t3"]


@st.composite
def team_streams(draw):
    n_a, n_v = draw(st.integers(1, 2)), draw(st.integers(0, 2))
    nodes = [qnode(f"a{i}", "a100", draw(st.integers(2, 8))) for i in range(n_a)]
    nodes += [qnode(f"v{i}", "v100", draw(st.integers(2, 8))) for i in range(n_v)]
    teams = {t: TeamInfo(t, "p", weight=draw(st.sampled_from([1.0, 2.0]))) for t in TEAM_NAMES}
    jobs = []
    for i in range(draw(st.integers(2, 30))):
        jobs.append(dict(
            at=draw(st.integers(0, 8)),
            req=qjob(f"j{i}", pool="p", team=draw(st.sampled_from(TEAM_NAMES)),
                     prio=draw(st.sampled_from(["P1", "P1", "P2", "P0"])),
                     gpus=draw(st.integers(1, 4)), replicas=(n := draw(st.integers(1, 2))),
                     min_available=n),
            runtime=draw(st.sampled_from([50, 300, 2000, 20000])),
        ))
    budget = draw(st.sampled_from([0.0, 0.05, 1.0, 8.0]))
    return nodes, teams, jobs, draw(st.sampled_from([30, 100, 700])), budget


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(team_streams())
def test_fair_share_preemption_invariants(sc) -> None:
    """Every same-priority victim: preemptible, of another team of the preemptor's pool,
    its team (without all of this preemption's victims of it) still at or above its
    entitlement, while the preemptor's team with the job stays within its own; each
    preemption's fair victims lose at most the budget; no job lost or run twice; no card
    handed out twice."""
    nodes, teams, jobs, dt, budget = sc
    s = Sim(nodes=nodes, pools=[PoolInfo("p")], teams=teams,
            config={"min_run_time_s": 60, "fair_preemption_max_lost_gpu_h": budget})
    submitted: set[str] = set()
    for step in range(14):
        submitted |= s.submit_due(jobs, step)
        res = s.cycle()
        snap = s.last_snap
        by_id = {r.request.id: r for r in snap.running}
        pending = {j.id: j for j in snap.pending}
        ledger = QuotaLedger.from_snapshot(snap)
        ent = entitlements(snap)

        def held(team: str, ledger=ledger, snap=snap) -> float:
            return held_throughput(ledger.team_by_type[team], snap.gpu_types)
        lost: dict[str, float] = {}
        # replay the cycle's decisions in the order the engine took them (a job's
        # victims just before its admission), checking each victim against the ledger
        # the engine saw at that moment
        for p in res.preemptions:
            if p.by_job is None:  # step 2: expired leases, before any admission
                ledger.release(by_id[p.job_id])
        for a in res.admissions:
            pre = pending[a.job_id]
            taken: dict[str, float] = {}
            for p in (x for x in res.preemptions if x.by_job == a.job_id):
                v = by_id[p.job_id]
                if v.request.priority_value == pre.priority_value and p.kind == "preempt":
                    t = v.request.team
                    taken[t] = taken.get(t, 0.0) + held_throughput(
                        units_by_type(v.placements), snap.gpu_types)
            for p in (x for x in res.preemptions if x.by_job == a.job_id):
                v = by_id[p.job_id]
                assert v.request.preemptible and v.request.priority != "P0"
                assert v.request.priority_value <= pre.priority_value
                if v.request.priority_value == pre.priority_value and p.kind == "preempt":
                    assert "fair share" in p.reason
                    assert v.request.team != pre.team and v.request.pool == pre.pool
                    vt = v.request.team
                    # up to the solver's precision, as the engine compares
                    assert at_least(held(vt) - taken[vt], ent.of(vt))
                    assert within(held(pre.team), ent.of(pre.team))
                    event("fair-share victim")
                    lost[pre.id] = lost.get(pre.id, 0.0) + sum(
                        gpus_held(x, snap.gpu_types) for x in v.placements
                    ) * (snap.now - v.started_at)
            for p in (x for x in res.preemptions if x.by_job == a.job_id):
                ledger.release(by_id[p.job_id])
            ledger.reserve(RunningJob(pre, a.placements, snap.now))
        if budget > 0:
            assert all(x <= budget * 3600 + 1e-6 for x in lost.values())
        state = ClusterState.from_snapshot(s.snap())
        for n in state.nodes.values():
            assert not any(device_overcommitted(d) for d in n.devices)
        ids = [*s.pending, *s.running, *s.done]
        assert len(ids) == len(set(ids)) and set(ids) == submitted
        s.advance(dt)
    assert PRIO  # the priorities the stream draws from


def test_no_rule_without_a_same_priority_job_of_another_team_in_the_pool() -> None:
    """The cycle skips the fair-share rule (and its search) when nobody could be its
    victim: the only running jobs are the waiting job's own team's, or of another tier."""
    from app.scheduling.engine import Cycle

    def cycle(sn):
        c = Cycle(sn)
        c.build()
        return c

    own = snap(NODES, [want := job("s", team="big", submitted_at=500.0)],
               running=_big_fills_the_node(), teams=TEAMS, now=600.0)
    assert cycle(own).fair_rule(want) is None
    other = snap(NODES, [want], running=_big_fills_the_node(team="small"), teams=TEAMS,
                 now=600.0)
    assert cycle(other).fair_rule(want) is not None
    p2 = [running(job(f"l{i}", team="small", priority="P2", priority_value=100,
                          submitted_at=0.0),
                  whole("a", "a100-80g", (i,)), started_at=0.0) for i in range(4)]
    assert cycle(snap(NODES, [want], running=p2, teams=TEAMS, now=600.0)).fair_rule(want) is None


def test_a_job_started_from_a_reservation_is_no_fair_share_victim() -> None:
    # the big team's jobs waited reservation_after_s (12 h) before they started: exempt
    wait = SchedulerConfig().reservation_after_s
    pend = [job("s", team="small", submitted_at=wait + 500.0)]
    assert not _run(pend, _big_fills_the_node(started_at=wait), now=wait + 600.0).preemptions
    # the same jobs started a little sooner: the youngest is stopped as usual
    res = _run(pend, _big_fills_the_node(started_at=wait - 100.0), now=wait + 600.0)
    assert [p.job_id for p in res.preemptions] == ["b3"]


def test_reclaim_needs_the_victims_team_at_its_share_after_removal() -> None:
    # one 8-card job of team big on a 8-card node: big is over its type share (4 of 8)
    # only by this job; without it big holds 0 -- a 1-card job of small may not stop it
    nodes = [node("a", "a100-80g", 8)]
    big = running(job("g", team="big", gpus=8), whole("a", "a100-80g", tuple(range(8))),
                  started_at=0.0)
    res = schedule(snap(nodes, [job("s", team="small", submitted_at=500.0)], running=[big],
                        teams=TEAMS, now=600.0))
    assert not res.preemptions


def test_a_whole_gang_is_not_evicted_for_a_small_job_while_its_cards_would_stay_idle() -> None:
    """Seen live: a 64 CU gang preempted for an 8 CU job, the V100s then 19 % used. Team a
    runs a 12-card gang (started 300 s ago, the cheapest victim by lost work) and four
    1-card jobs; team b wants 2 cards. The old dominant-share rule let b stop the whole
    gang (a without it still held more than b); now a must keep its entitlement (14 of the
    16 cards) after the removal, so two of its 1-card jobs make room instead."""
    nodes = [node("n0", "v100-16g", 8), node("n1", "v100-16g", 8)]
    teams = {"a": TeamInfo("a", "p"), "b": TeamInfo("b", "p")}
    gang_req = job("gang", team="a", gpus=4, replicas=3, min_available=3,
                   gpu_types=("v100-16g",))
    gang = running(gang_req, whole("n0", "v100-16g", (0, 1, 2, 3)),
                   whole("n0", "v100-16g", (4, 5, 6, 7), replica=1),
                   whole("n1", "v100-16g", (0, 1, 2, 3), replica=2), started_at=7000.0)
    singles = [running(job(f"s{i}", team="a", gpu_types=("v100-16g",)),
                       whole("n1", "v100-16g", (4 + i,)), started_at=100.0 + i)
               for i in range(4)]
    want = job("w", team="b", gpus=2, gpu_types=("v100-16g",), submitted_at=7200.0)
    res = schedule(snap(nodes, [want], running=[gang, *singles], teams=teams, now=7300.0))
    stopped = sorted(p.job_id for p in res.preemptions)
    assert "gang" not in stopped
    assert len(stopped) == 2 and all(s.startswith("s") for s in stopped)
    assert [a.job_id for a in res.admissions] == ["w"]

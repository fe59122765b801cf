"""Fair order, backfill and reservations."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.scheduling.engine import schedule
from app.scheduling.model import FairState, PoolInfo, SchedulerConfig, TeamInfo
from app.scheduling.ordering import FairOrder, team_queue_reference
from app.scheduling.quota import QuotaLedger
from tests.unit.core_fixtures import job, node, running, snap, whole


def admitted(res) -> list[str]:
    return [a.job_id for a in res.admissions]


def test_priority_class_first() -> None:
    nodes = [node("a", "a100-80g", 1)]
    old_p2 = job("old", priority="P2", priority_value=100, submitted_at=0)
    new_p0 = job("new", priority="P0", priority_value=1000, submitted_at=50)
    res = schedule(snap(nodes, [old_p2, new_p0], now=100))
    assert admitted(res) == ["new"]
    assert res.order == ["new", "old"]


def test_lowest_dominant_share_first() -> None:
    teams = {"x": TeamInfo("x", "p"), "y": TeamInfo("y", "p")}
    nodes = [node("a", "a100-80g", 3)]
    busy = running(job("bx", team="x"), whole("a", "a100-80g", (0, 1)))
    jx = job("jx", team="x", submitted_at=0)
    jy = job("jy", team="y", submitted_at=10)
    res = schedule(snap(nodes, [jx, jy], running=[busy], teams=teams, now=20))
    assert admitted(res) == ["jy"]


def test_team_weight_divides_share() -> None:
    teams = {"x": TeamInfo("x", "p", weight=4), "y": TeamInfo("y", "p", weight=1)}
    nodes = [node("a", "a100-80g", 4)]
    run = [running(job("bx", team="x"), whole("a", "a100-80g", (0, 1))),  # 20 CU / 4 = 5
           running(job("by", team="y"), whole("a", "a100-80g", (2,)))]  # 10 CU / 1 = 10
    res = schedule(snap(nodes, [job("jy", team="y"), job("jx", team="x", submitted_at=5)],
                        running=run, teams=teams, now=10))
    assert admitted(res) == ["jx"]


def test_share_is_re_read_after_each_admission() -> None:
    teams = {"x": TeamInfo("x", "p"), "y": TeamInfo("y", "p")}
    nodes = [node("a", "a100-80g", 4)]
    pending = [job(f"x{i}", team="x", submitted_at=i) for i in range(4)]
    pending += [job(f"y{i}", team="y", submitted_at=10 + i) for i in range(4)]
    res = schedule(snap(nodes, pending, teams=teams, now=100))
    got = admitted(res)
    assert sorted(got) == ["x0", "x1", "y0", "y1"]


def test_pool_below_guarantee_first() -> None:
    pools = {"p": PoolInfo("p"), "g": PoolInfo("g", guaranteed={"a100-80g": 20})}
    teams = {"t": TeamInfo("t", "p"), "u": TeamInfo("u", "g")}
    nodes = [node("a", "a100-80g", 1)]
    res = schedule(snap(nodes, [job("jp", submitted_at=0),
                                job("jg", team="u", pool="g", submitted_at=50)],
                        pools=pools, teams=teams, now=60))
    assert admitted(res) == ["jg"]


def test_fifo_within_team_and_backfill_past_a_big_job() -> None:
    nodes = [node("a", "a100-80g", 4)]
    big = job("big", gpus=8, submitted_at=0)
    small = job("small", gpus=2, submitted_at=1)
    res = schedule(snap(nodes + [node("b", "a100-80g", 8)], [big, small],
                        running=[running(job("r"), whole("b", "a100-80g", (0,)))], now=10))
    assert admitted(res) == ["small"]
    assert "needs 8 x a100-80g" in res.reasons["big"]


def _reservation_case(small, now=2000.0):
    nodes = [node("n0", "a100-80g", 8), node("n1", "a100-80g", 8)]
    r1 = job("r1", gpus=4, duration_estimate_s=100)
    r2 = job("r2", gpus=6, duration_estimate_s=5000)
    run = [running(r1, whole("n0", "a100-80g", (0, 1, 2, 3)), started_at=1950),
           running(r2, whole("n1", "a100-80g", (0, 1, 2, 3, 4, 5)), started_at=1000)]
    big = job("big", gpus=8, submitted_at=0)
    cfg = SchedulerConfig(reservation_after_s=1800)
    return schedule(snap(nodes, [big, small], running=run, now=now, config=cfg))


def test_long_waiting_job_gets_reservation_and_blocks_unknown_duration_backfill() -> None:
    res = _reservation_case(job("small", gpus=4, submitted_at=1990))
    assert admitted(res) == []
    assert res.reasons["big"].startswith("waiting for reservation")
    assert "n0" in res.reasons["big"] and "expected start in 50s" in res.reasons["big"]
    assert res.reasons["small"].startswith("free capacity is held for job(s) big")
    assert "expected start in 50s" in res.reasons["small"]


def test_short_job_may_backfill_into_reservation() -> None:
    res = _reservation_case(job("small", gpus=4, submitted_at=1990, duration_estimate_s=30))
    assert admitted(res) == ["small"]


def test_job_outside_the_held_part_is_not_blocked() -> None:
    res = _reservation_case(job("small", gpus=2, submitted_at=1990))
    assert admitted(res) == ["small"]
    assert res.admissions[0].placements[0].node == "n1"


def test_no_reservation_before_threshold() -> None:
    res = _reservation_case(job("small", gpus=4, submitted_at=1990), now=1000.0)
    # big waited 1000 s < 1800 s: small backfills freely
    assert admitted(res) == ["small"]


def test_team_quota_blocks_and_explains() -> None:
    teams = {"t": TeamInfo("t", "p", quota_units=30)}
    res = schedule(snap([node("a", "a100-80g", 8)], [job("x", gpus=2), job("y", gpus=2,
                                                                         submitted_at=1)],
                        teams=teams))
    assert admitted(res) == ["x"]
    assert res.reasons["y"].startswith("team t at quota 20/30 CU")


def test_every_pending_job_has_a_reason_and_a_position() -> None:
    nodes = [node("a", "a100-80g", 2)]
    pending = [job(f"j{i}", gpus=1 + i % 3, submitted_at=i) for i in range(20)]
    res = schedule(snap(nodes, pending))
    ids = {j.id for j in pending}
    assert set(res.order) == ids
    waiting = ids - set(admitted(res))
    assert waiting and all(res.reasons.get(i) or res.unschedulable.get(i) for i in waiting)


def test_many_identical_unschedulable_jobs_share_one_reason() -> None:
    nodes = [node("a", "a100-80g", 8)]
    pending = [job(f"j{i}", gpus=8, submitted_at=i) for i in range(1000)]
    res = schedule(snap(nodes, pending))
    assert len(res.admissions) == 1
    assert len({res.reasons[f"j{i}"] for i in range(1, 1000)}) == 1


def _credit_case(waited_s: float, credit_x: float = 0.0, x_busy: bool = True) -> str:
    """Team x holds a card (unless ``x_busy`` is False); its job has waited ``waited_s``;
    team y's job is new; team x carries ``credit_x`` of deficit from earlier cycles."""
    teams = {"x": TeamInfo("x", "p"), "y": TeamInfo("y", "p")}
    nodes = [node("a", "a100-80g", 2)]
    busy = [running(job("bx", team="x"), whole("a", "a100-80g", (0,)))] if x_busy else []
    jx = job("jx", team="x", submitted_at=0)
    jy = job("jy", team="y", submitted_at=waited_s - 10)
    sn = snap(nodes, [jx, jy], running=busy, teams=teams, now=waited_s)
    sn.fair = FairState(waited_s, {"x": credit_x})
    return schedule(sn).order[0]


def test_fair_share_holds_for_hours_of_waiting_by_default() -> None:
    # waiting alone does not make the busy team's job jump the lighter team's: there is
    # no aging knob (with the old 1-hour aging the queue turned FIFO across teams)
    assert not hasattr(SchedulerConfig(), "aging_s")
    assert _credit_case(2 * 3600) == "jy"
    assert _credit_case(13 * 3600) == "jy"
    # nor does credit: the team holding less of its entitlement goes first
    assert _credit_case(600, credit_x=SchedulerConfig().fair_horizon_s) == "jy"


def test_a_team_owed_credit_goes_first_among_equals() -> None:
    # neither team holds anything: the team owed credit goes first, before an older job
    teams = {"x": TeamInfo("x", "p"), "y": TeamInfo("y", "p")}
    jx = job("jx", team="x", submitted_at=100)
    jy = job("jy", team="y", submitted_at=0)
    sn = snap([node("a", "a100-80g", 1)], [jx, jy], teams=teams, now=600)
    assert schedule(sn).order[0] == "jy"  # by age
    sn = snap([node("a", "a100-80g", 1)], [jx, jy], teams=teams, now=600)
    sn.fair = FairState(600, {"x": 1000.0})
    assert schedule(sn).order[0] == "jx"  # x is owed credit


# -- the team queues' fast path equals the plain sorts ----------------------------------
_ORDER_JOBS = st.lists(
    st.tuples(
        st.sampled_from(["x", "y", "z"]),  # team
        st.sampled_from([100, 500, 1000]),  # priority
        st.sampled_from([0.0, 1.0, 2.0, 50.0, 1000.0, 2900.0, 7200.0]),  # submitted_at
        st.sampled_from([None, 10.0, 600.0, 3600.0]),  # duration_estimate_s
        st.sampled_from([None, 30.0, 3600.0]),  # predicted_s
        st.sampled_from([0, 0, 0, 1]),  # preemption_count
    ),
    max_size=40,
)


@settings(max_examples=300, deadline=None)
@given(_ORDER_JOBS, st.randoms(use_true_random=False), st.booleans(),
       st.sampled_from([0.0, 500.0, 3000.0, 10_000.0]), st.sampled_from([1800.0, float("inf")]))
def test_team_queues_equal_the_plain_sorts(rows, rnd, shortest_first, now, cap) -> None:
    """FairOrder's queues (the input checked for age order, one stable lexsort per team)
    are the plain stable sorts they replace, for any input order, ties included."""
    pending = [
        job(f"j{i}", team=t, priority_value=p, submitted_at=s, duration_estimate_s=d,
            predicted_s=pr, preemption_count=c)
        for i, (t, p, s, d, pr, c) in enumerate(rows)
    ]
    for shuffled in (False, True):
        if shuffled:
            rnd.shuffle(pending)
        got = FairOrder(pending, QuotaLedger.from_snapshot(snap([], [])), now,
                        lambda team: 0, shortest_first, 3600.0, cap).queues
        want: dict[str, list] = {}
        for j in pending:
            want.setdefault(j.team, []).append(j)
        for team, q in want.items():
            q.sort(key=lambda j: (j.submitted_at, j.id))
            want[team] = team_queue_reference(q, now, shortest_first, 3600.0, cap)
        assert {t: [j.id for j in q] for t, q in got.items()} == {
            t: [j.id for j in q] for t, q in want.items()}


def test_a_uniform_backlog_keeps_its_age_order_and_a_requeued_job_still_goes_first() -> None:
    """The team queue's one-pass check (one priority, one estimate, nobody requeued: the
    age order) and what the sorts do once one job breaks it."""
    from app.scheduling.ordering import team_queue

    q = [job(f"j{i}", submitted_at=float(i), duration_estimate_s=600.0) for i in range(6)]
    for now in (0.0, 1000.0, 10**6):
        assert team_queue(q, now, True, 3600.0, 1800.0) is q
        assert team_queue(q, now, True, 3600.0, 1800.0) == team_queue_reference(
            q, now, True, 3600.0, 1800.0)
    q[4] = job("j4", submitted_at=4.0, duration_estimate_s=600.0, preemption_count=1)
    got = [j.id for j in team_queue(q, 0.0, True, 3600.0, 1800.0)]
    assert got[0] == "j4" and got == [
        j.id for j in team_queue_reference(q, 0.0, True, 3600.0, 1800.0)]

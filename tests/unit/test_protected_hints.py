"""A waiting job's reason promises a preemption only when the preemptor itself would
make it: the note about victims the minimum run time protects comes from a what-if of
the real preemption rules at the time the protection ends (engine.Cycle._protected_note).

The defect it fixes: a P0 job of team recsys (4 cards of 40 GB or more) read "lower-
priority job(s) 12 ran less than min_run_time_s (60 s): may be preempted for it in 55 s"
for 11 minutes and more; job 12 was never preempted, because a non-preemptible job
never borrows and its pool could not pay for the cards stopping job 12 would free."""

from __future__ import annotations

from app.scheduling.engine import schedule
from app.scheduling.model import PoolInfo, TeamInfo
from tests.unit.quota_sim import job, node, running, snapshot

NODES = [node("a0", "a100", 8), node("a1", "a100", 8)]
# inference may run 40 CU of a100 on its guarantee (enough for 4 cards: the submit check
# lets the job in), training the rest; nothing is unguaranteed
POOLS = [PoolInfo("inference", guaranteed={"a100": 40}),
         PoolInfo("training", guaranteed={"a100": 120})]
TEAMS = {"recsys": TeamInfo("recsys", "inference", default_priority="P0"),
         "nlp": TeamInfo("nlp", "training")}


def _issue_case(now: float):
    """Two cards of inference's guarantee are held by another P0 job of recsys; every
    other card by nlp's P1 jobs, job 12 of them started 5 s ago."""
    p0 = job("serving", pool="inference", prio="P0", team="recsys", gpus=2)
    old = job("old", pool="training", team="nlp", gpus=6)
    fresh = job("12", pool="training", team="nlp", gpus=4)
    other = job("other", pool="training", team="nlp", gpus=4)
    run = [running(p0, "a0", "a100", (0, 1)),
           running(old, "a0", "a100", (2, 3, 4, 5, 6, 7)),
           running(fresh, "a1", "a100", (0, 1, 2, 3), started_at=995.0),
           running(other, "a1", "a100", (4, 5, 6, 7))]
    waiting = job("30", pool="inference", prio="P0", team="recsys", gpus=4,
                  min_gpu_memory_gb=40)
    return snapshot(NODES, POOLS, [waiting], run, now=now, teams=TEAMS, min_run_time_s=60)


def test_p0_job_its_pool_cannot_pay_for_is_promised_no_preemption() -> None:
    res = schedule(_issue_case(1000.0))
    assert res.preemptions == [] and res.admissions == []
    why = res.reasons["30"]
    assert "may be preempted for it" not in why
    assert "no preemption will make room for it" in why
    assert "non-preemptible jobs do not borrow" in why
    assert ("submit it as P1 (a preemptible job may borrow other pools' idle guarantee) or "
            "ask an admin to raise pool inference's guarantee of a100") in why
    assert why.fields.get("no_preemption") is True and "start_in_s" not in why.fields
    # 55 s later, when job 12's protection has ended, the preemptor indeed stops nobody
    later = schedule(_issue_case(1055.0))
    assert later.preemptions == [] and later.admissions == []
    assert "may be preempted" not in later.reasons["30"]


def test_protected_job_that_would_not_free_a_place_is_not_promised() -> None:
    """A P1 job of 8 cards on one node: the fresh P2 job holds 7 cards of a0, a P0 job the
    eighth; stopping the P2 job never frees a whole node, so nothing is promised."""
    pools = [PoolInfo("p")]
    p0 = job("keep", prio="P0", gpus=1)
    fresh = job("fresh", prio="P2", gpus=7)
    run = [running(p0, "a0", "a100", (0,)),
           running(fresh, "a0", "a100", tuple(range(1, 8)), started_at=990.0)]
    waiting = job("j", prio="P1", gpus=8)
    res = schedule(snapshot([node("a0", "a100", 8)], pools, [waiting], run, now=1000,
                            min_run_time_s=60))
    why = res.reasons["j"]
    assert "may be preempted" not in why
    assert ("no preemption will make room for it: the rest of the room it needs is held by "
            "jobs it may not preempt") in why
    res = schedule(snapshot([node("a0", "a100", 8)], pools, [waiting], run, now=1050,
                            min_run_time_s=60))
    assert res.preemptions == []


def test_promise_names_the_time_the_preemptor_would_act() -> None:
    """Two fresh P2 jobs of 4 cards each on the only node: stopping the first (free in
    10 s) is not enough for 8 cards, so the promise is for 50 s, when both may go. The
    old note said 10 s. The time is a field (the estimated start the API shows)."""
    pools = [PoolInfo("p")]
    f1 = job("f1", prio="P2", gpus=4)
    f2 = job("f2", prio="P2", gpus=4)
    run = [running(f1, "a0", "a100", (0, 1, 2, 3), started_at=950.0),
           running(f2, "a0", "a100", (4, 5, 6, 7), started_at=990.0)]
    waiting = job("j", prio="P1", gpus=8)
    snap = snapshot([node("a0", "a100", 8)], pools, [waiting], run, now=1000,
                    min_run_time_s=60)
    why = schedule(snap).reasons["j"]
    assert why.endswith("lower-priority job(s) f1, f2 ran less than min_run_time_s (60 s): "
                        "may be preempted for it in 50 s")
    assert why.fields["start_in_s"] == 50.0
    res = schedule(snapshot([node("a0", "a100", 8)], pools, [waiting], run, now=1010,
                            min_run_time_s=60))
    assert res.preemptions == []  # at 10 s nobody was stopped: 50 s was the truth
    res = schedule(snapshot([node("a0", "a100", 8)], pools, [waiting], run, now=1050,
                            min_run_time_s=60))
    assert sorted(p.job_id for p in res.preemptions) == ["f1", "f2"]

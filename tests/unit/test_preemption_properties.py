"""Property tests over random clusters, pools and job streams on a virtual clock.

Invariants after every cycle: no pool arithmetic negative or above capacity;
every victim is lower-priority-and-preemptible or holds an expired,
reclaimable lease; P0 is never a victim; no device is handed out twice; no
job is lost (each is pending, running or finished -- exactly one).
"""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.scheduling.leases import is_expired, reclaimable_lease
from app.scheduling.model import PoolInfo
from app.scheduling.pools import PoolLedger
from app.scheduling.state import EPS, ClusterState, device_overcommitted
from tests.unit.quota_sim import PRIO, Sim, job, node

POOL_NAMES = ["p", "q", "r"]


@st.composite
def scenarios(draw):
    nodes = [node(f"a{i}", "a100", draw(st.integers(2, 8)))
             for i in range(draw(st.integers(1, 3)))]
    nodes += [node(f"v{i}", "v100", draw(st.integers(2, 8)))
              for i in range(draw(st.integers(0, 2)))]
    pools = []
    for name in POOL_NAMES[: draw(st.integers(2, 3))]:
        guaranteed = {t: draw(st.sampled_from([0, 20, 40, 80, 200]))
                      for t in draw(st.sets(st.sampled_from(["a100", "v100"])))}
        pools.append(PoolInfo(
            name, guaranteed=guaranteed,
            borrow_limit=draw(st.sampled_from([None, 0, 20, 60])),
            lend_limit=draw(st.sampled_from([{}, {"a100": 10}, {"a100": 40}])),
            max_borrow_seconds=draw(st.sampled_from([100, 300, 1800])),
            reclaim=draw(st.sampled_from(["always", "when_needed"])),
            weight=draw(st.sampled_from([1, 2])),
        ))
    jobs = []
    for i in range(draw(st.integers(1, 25))):
        jobs.append(dict(
            at=draw(st.integers(0, 6)),
            req=job(f"j{i}", pool=draw(st.sampled_from([p.name for p in pools])),
                    prio=draw(st.sampled_from(list(PRIO))),
                    gpus=draw(st.integers(1, 8)), replicas=(n := draw(st.integers(1, 2))),
                    min_available=n),
            runtime=draw(st.sampled_from([50, 200, 1000, 5000])),
        ))
    dt = draw(st.sampled_from([30, 100, 400]))
    return nodes, pools, jobs, dt


def check_ledger(s: Sim) -> None:
    snap = s.snap()
    lg = PoolLedger.from_snapshot(snap)
    for t, cap in lg.capacity.items():
        assert sum(lg.guarantee(p, t) for p in lg.pools) <= cap + EPS
        assert sum(lg.used[(p, t)] for p in lg.pools) <= cap + EPS
        assert sum(lg.shared_used(p, t) for p in lg.pools) <= lg.shared_total(t) + EPS
        for p in lg.pools:
            u = lg.usage(p).get(t)
            if u is None:
                continue
            for v in (u.guaranteed, u.used, u.borrowed, u.lent, u.shared, u.idle, u.lendable):
                assert -EPS <= v <= cap + EPS
            # a guarantee is either used by its pool, lent, or idle -- never twice
            assert lg.own(p, t) + u.lent <= u.guaranteed + EPS
    state = ClusterState.from_snapshot(snap)
    for n in state.nodes.values():
        assert not any(device_overcommitted(d) for d in n.devices)
        assert n.cpu_used <= n.cpu + EPS


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_invariants_hold_over_random_runs(sc) -> None:
    nodes, pools, jobs, dt = sc
    s = Sim(nodes=nodes, pools=pools, config={"min_run_time_s": 60})
    submitted: set[str] = set()
    for step in range(12):
        submitted |= s.submit_due(jobs, step)
        res = s.cycle()
        snap = s.last_snap
        by_id = {r.request.id: r for r in snap.running}
        for p in res.preemptions:
            v = by_id[p.job_id]
            assert v.request.preemptible and v.request.priority != "P0"
            if p.kind == "reclaim":
                assert any(is_expired(x, snap.now) for x in v.leases)
                if p.by_job is not None:
                    pre = next(j for j in snap.pending if j.id == p.by_job)
                    assert reclaimable_lease(v, pre, snap) is not None
            else:
                pre = next(j for j in snap.pending if j.id == p.by_job)
                assert v.request.priority_value < pre.priority_value
        for a in res.admissions:
            req = next(j for j in snap.pending if j.id == a.job_id)
            assert not (a.leases and not req.preemptible)  # P0 never borrows
        check_ledger(s)
        ids = [*s.pending, *s.running, *s.done]
        assert len(ids) == len(set(ids)) and set(ids) == submitted
        s.advance(dt)

"""Property tests: random clusters and job mixes, several cycles each.

Checked by independent accounting (not by ClusterState): no device,
slice, share, CPU or memory is ever over-allocated; no team quota is
exceeded; gangs are all-or-nothing; every admitted replica satisfies its
memory and type constraints.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.scheduling.engine import schedule
from app.scheduling.filters import allowed_type_names
from app.scheduling.model import (
    JobRequest,
    PoolInfo,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TeamInfo,
)
from tests.unit.core_fixtures import PRIOS, TYPES, node

EPS = 1e-6
LAYOUTS = [(), ("3g.40gb", "3g.40gb"), ("2g.20gb", "2g.20gb", "2g.20gb"), ("1g.10gb",) * 7]


@st.composite
def clusters(draw):
    nodes = []
    for i in range(draw(st.integers(1, 6))):
        t = draw(st.sampled_from([*TYPES, None]))
        gpus = 0 if t is None else draw(st.integers(1, 8))
        mig = {}
        if t == "a100-80g":
            for d in range(gpus):
                lay = draw(st.sampled_from(LAYOUTS))
                if lay:
                    mig[d] = lay
        nodes.append(node(
            f"n{i}", t, gpus, cpu=draw(st.sampled_from([8, 32, 64])),
            mem=draw(st.sampled_from([32, 256])), network=draw(st.sampled_from(["eth", "ib"])),
            rack=draw(st.sampled_from(["r1", "r2", None])), mig=mig,
        ))
    return nodes


@st.composite
def jobs(draw, idx):
    mode = draw(st.sampled_from(["gpus", "gpus", "gpu_units", "mig", "gpu_share"]))
    kw: dict = {"gpus": None}
    if mode == "gpus":
        kw["gpus"] = draw(st.integers(0, 8))
    elif mode == "gpu_units":
        kw["gpu_units"] = draw(st.sampled_from([2.0, 4.0, 7.5, 12.0, 20.0, 40.0]))
        kw["allow_mixed_types"] = draw(st.booleans())
    elif mode == "mig":
        kw["mig"] = draw(st.sampled_from(["auto", "2g.20gb", "3g.40gb", "1g.10gb"]))
    else:
        kw["gpu_share"] = draw(st.sampled_from([0.25, 0.3, 0.5, 0.75]))
    replicas = 1 if mode == "gpu_units" else draw(st.integers(1, 3))
    team = draw(st.sampled_from(["x", "y"]))
    return JobRequest(
        id=f"j{idx}", name=f"j{idx}", team=team, pool=draw(st.sampled_from(["p", "q"])),
        priority="P1", priority_value=draw(st.sampled_from([100, 500, 1000])), preemptible=True,
        submitted_at=float(idx), replicas=replicas,
        min_available=draw(st.integers(1, replicas)),
        min_gpu_memory_gb=draw(st.sampled_from([0, 8, 18, 30, 60])),
        gpu_types=draw(st.sampled_from([(), ("a100-80g",), ("v100-16g", "rtx4090-24g")])),
        cpu=draw(st.sampled_from([0.5, 4, 16, 40])), memory_gb=draw(st.sampled_from([1, 16, 100])),
        placement=draw(st.sampled_from(["binpack", "spread"])),
        topology=draw(st.sampled_from(["none", "same_node", "same_rack", "fast_network"])),
        duration_estimate_s=draw(st.sampled_from([None, 60.0, 5000.0])),
        **kw,
    )


TEAMS = {
    "x": TeamInfo("x", "p", quota_units=60, quota_by_type={"a100-80g": 40}),
    "y": TeamInfo("y", "p", weight=2, quota_units=None),
}
POOLS = {"p": PoolInfo("p"), "q": PoolInfo("q", gpu_types=("rtx4090-24g", "v100-16g"),
                                                guaranteed={"v100-16g": 8})}


def check(nodes, running: list[RunningJob]) -> None:
    by_node = {n.name: n for n in nodes}
    whole = set()
    slices = set()
    share = defaultdict(float)
    share_mem = defaultdict(float)
    cpu = defaultdict(float)
    mem = defaultdict(float)
    team_total = defaultdict(float)
    team_type = defaultdict(float)
    for r in running:
        j = r.request
        ps = r.placements
        assert j.min_available <= len(ps) <= max(j.replicas, len(ps) if j.gpu_units else 0)
        if j.gpu_units is not None:
            assert sum(p.units for p in ps) + EPS >= j.gpu_units
            if not j.allow_mixed_types:
                assert len({p.gpu_type for p in ps}) == 1
            assert len({p.node for p in ps}) == len(ps)
        elif len(ps) > 1 and not j.allow_mixed_types:
            assert len({p.gpu_type for p in ps}) == 1
        if j.placement == "spread" and j.gpu_units is None:
            assert len({p.node for p in ps}) == len(ps)
        if j.topology == "same_node":
            assert len({p.node for p in ps}) == 1
        if j.topology == "same_rack" and len({p.node for p in ps}) > 1:
            assert len({by_node[p.node].rack for p in ps}) == 1
        if j.topology == "fast_network" and len({p.node for p in ps}) > 1:
            assert all(by_node[p.node].network in ("ib", "roce") for p in ps)
        allowed = set(allowed_type_names(j, TYPES, POOLS))
        for p in ps:
            n = by_node[p.node]
            cpu[p.node] += p.cpu
            mem[p.node] += p.memory_gb
            if p.gpu_type is None:
                assert j.mode == "gpus" and not j.gpus
                continue
            assert p.gpu_type == n.gpu_type and p.gpu_type in allowed
            t = TYPES[p.gpu_type]
            team_total[j.team] += p.units
            team_type[(j.team, p.gpu_type)] += p.units
            if p.mig:
                for dev, idx, prof in p.mig:
                    assert n.devices[dev].mig_layout[idx] == prof
                    assert t.mig_profiles[prof].memory_gb + EPS >= j.min_gpu_memory_gb
                    assert (p.node, dev, idx) not in slices
                    slices.add((p.node, dev, idx))
                if j.mig != "auto":
                    assert all(prof == j.mig for _, _, prof in p.mig)
            elif p.share:
                (dev,) = p.devices
                assert t.shareable and not n.devices[dev].mig_layout
                assert p.share_memory_gb + EPS >= j.min_gpu_memory_gb
                share[(p.node, dev)] += p.share
                share_mem[(p.node, dev)] += p.share_memory_gb
            else:
                assert t.memory_gb + EPS >= j.min_gpu_memory_gb
                if j.mode == "gpus":
                    assert len(p.devices) == j.gpus
                for dev in p.devices:
                    assert not n.devices[dev].mig_layout
                    assert (p.node, dev) not in whole
                    whole.add((p.node, dev))
    for key, s in share.items():
        assert s <= 1 + EPS and key not in whole
        assert share_mem[key] <= TYPES[by_node[key[0]].gpu_type].memory_gb + EPS
    for n in nodes:
        assert cpu[n.name] <= n.cpu + EPS and mem[n.name] <= n.memory_gb + EPS
    for name, info in TEAMS.items():
        if info.quota_units is not None:
            assert team_total[name] <= info.quota_units + EPS
        for t, q in info.quota_by_type.items():
            assert team_type[(name, t)] <= q + EPS


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_cycles_never_overallocate(data) -> None:
    nodes = data.draw(clusters())
    running: list[RunningJob] = []
    pending: list[JobRequest] = []
    idx = 0
    now = 0.0
    for _cycle in range(3):
        for _ in range(data.draw(st.integers(1, 8))):
            pending.append(data.draw(jobs(idx)))
            idx += 1
        snap = Snapshot(now, TYPES, nodes, POOLS, TEAMS, PRIOS, list(running), list(pending),
                        SchedulerConfig(reservation_after_s=data.draw(st.sampled_from([0, 1e9]))))
        res = schedule(snap)
        # preempted jobs leave the cluster and are requeued (as the dispatcher does)
        stopped = {p.job_id for p in res.preemptions}
        requeued = [r for r in running if r.request.id in stopped]
        running = [r for r in running if r.request.id not in stopped]
        by_id = {j.id: j for j in pending}
        assert not (set(a.job_id for a in res.admissions) & set(res.unschedulable))
        assert {r.request.id for r in requeued} == stopped  # only running jobs are stopped
        for a in res.admissions:
            running.append(RunningJob(by_id[a.job_id], a.placements, now))
        done = {a.job_id for a in res.admissions}
        for j in pending:
            if j.id not in done:
                assert res.reasons.get(j.id) or res.unschedulable.get(j.id)
        pending = [j for j in pending if j.id not in done and j.id not in res.unschedulable]
        pending += [r.request for r in requeued]
        check(nodes, running)
        # some running jobs finish
        keep = data.draw(st.lists(st.booleans(), min_size=len(running), max_size=len(running)))
        running = [r for r, k in zip(running, keep, strict=True) if k]
        now += 100.0

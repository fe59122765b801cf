"""The core survives a node whose cards, MIG layout or type changed under running jobs.

Before, ``PATCH /v1/nodes/v100-1 {"gpus": 4}`` under an 8-card job made every
pass fail with an ``IndexError`` in ``ClusterState``. The API now refuses such a
change (tests/integration/test_admin_changes.py); the core must also hold when one
slips through (a Kubernetes node re-labelled, a device plugin re-advertising fewer
cards): the node takes nothing new until the job is gone, and the pass goes on.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.scheduling.engine import schedule
from app.scheduling.model import ReplicaPlacement
from app.scheduling.state import ClusterState, device_overcommitted
from tests.unit.core_fixtures import job, node, running, snap, whole


def test_shrunk_node_under_a_running_job_does_not_stop_the_pass():
    # 8 V100 cards held on v100-1, the node now says 4; a 1-GPU job waits.
    big = running(job("big", gpus=8, team="t"), whole("v100-1", "v100-16g", tuple(range(8))))
    s = snap([node("v100-1", "v100-16g", 4), node("v100-2", "v100-16g", 8)],
             [job("small", gpus=1, team="t")], running=[big])
    res = schedule(s)  # raised IndexError before
    placed = {p.node for a in res.admissions for p in a.placements}
    assert placed == {"v100-2"}  # the stranded node takes nothing new


def test_removed_mig_slice_under_a_running_job():
    held = ReplicaPlacement(0, "a100-1", "a100-80g", mig=((0, 1, "3g.40gb"),), units=4.286)
    s = snap([node("a100-1", "a100-80g", 1, mig={0: ("2g.20gb",)})],
             [job("w", mig="1g.10gb")], running=[running(job("slice", mig="3g.40gb"), held)])
    schedule(s)
    state = ClusterState.from_snapshot(s)
    assert not state.nodes["a100-1"].schedulable


changes = st.sampled_from(["shrink", "grow", "retype", "mig", "none"])


@settings(max_examples=60, deadline=None)
@given(
    held=st.lists(st.integers(1, 4), min_size=1, max_size=3),
    edits=st.lists(st.tuples(st.integers(0, 2), changes, st.integers(0, 8)), max_size=6),
    pending=st.lists(st.integers(0, 4), max_size=6),
)
def test_random_admin_writes_against_running_jobs_keep_passes_working(held, edits, pending):
    """Random admin writes (cards, type, MIG layout) on nodes that hold running jobs:
    every pass succeeds, and no card ends up handed out twice."""
    gpus = {f"n{i}": 8 for i in range(3)}
    types = {f"n{i}": "v100-16g" for i in range(3)}
    mig: dict[str, dict[int, tuple[str, ...]]] = {f"n{i}": {} for i in range(3)}
    runs = []
    for i, k in enumerate(held):
        name = f"n{i % 3}"
        start = sum(h for j, h in enumerate(held[:i]) if j % 3 == i % 3)
        devs = tuple(range(start, min(start + k, 8)))
        if devs:
            runs.append(running(job(f"r{i}", gpus=len(devs)), whole(name, "v100-16g", devs,
                                                                    replica=0)))
    for idx, what, n in edits:
        name = f"n{idx}"
        if what == "shrink":
            gpus[name] = min(gpus[name], n)
        elif what == "grow":
            gpus[name] = max(gpus[name], n)
        elif what == "retype":
            types[name] = "a100-80g" if n % 2 else "v100-16g"
        elif what == "mig" and gpus[name] > 0:
            types[name] = "a100-80g"
            mig[name] = {n % gpus[name]: ("3g.40gb", "3g.40gb")}
    nodes = [node(name, types[name] if gpus[name] else None, gpus[name], mig=mig[name])
             for name in gpus]
    s = snap(nodes, [job(f"p{i}", gpus=g) for i, g in enumerate(pending)], running=runs)
    for _ in range(2):
        res = schedule(s)
        state = ClusterState.from_snapshot(s)
        for a in res.admissions:
            for p in a.placements:
                state.apply(p)
        for n_ in state.nodes.values():
            assert not any(device_overcommitted(d) for d in n_.devices)

"""The fill protocol: arithmetic on a hand-checked tiny cluster, determinism, re-checks."""

import copy
import json
import random

import pytest

from app.scheduling.placement import place_job
from app.scheduling.state import ClusterState
from app.simulate.alibaba import read_nodes, read_pods
from app.simulate.fill import (
    FILL_POLICIES,
    FillRun,
    check_placements,
    fill_sequence,
    make_policy,
    parse_seeds,
    replay_sequence,
    run_fill,
    summarize,
)
from app.simulate.fill_command import run_fill_command
from app.simulate.fill_core import CorePolicy
from app.simulate.fill_state import FillCluster, FillPod
from tests.unit.openb_fixtures import random_trace, write_nodes, write_pods

TINY_NODES = [("a", 8000, 1000, 2, "G2"), ("b", 4000, 1000, 1, "T4")]
TINY_PODS = [  # forced placements: the arithmetic does not depend on the policy
    ("p1", 1000, 10, 2, 1000, ""),  # only node a has 2 cards        -> a, arrived 2000
    ("p2", 1000, 10, 1, 500, "T4"),  # T4 only                        -> b, arrived 2500
    ("p3", 1000, 10, 1, 1000, ""),  # no whole card left              -> dropped, arrived 3500
    ("p4", 1000, 10, 1, 500, ""),  # only b's half card               -> b, arrived 4000
]


def _tiny(tmp_path):
    nodes = read_nodes(write_nodes(tmp_path / "n.csv", TINY_NODES))
    rows = [(*r, "LS", "Running", 0, 1, 0) for r in TINY_PODS]
    pods = read_pods(write_pods(tmp_path / "p.csv", rows))
    return nodes, pods


@pytest.mark.parametrize("policy", FILL_POLICIES)
def test_hand_checked_arithmetic(tmp_path, policy):
    nodes, pods = _tiny(tmp_path)
    cl = FillCluster(nodes)
    assert cl.capacity_milli == 3000
    run = FillRun(seed=0, policy=policy, total_gpus=3)
    pol = make_policy(policy, random.Random(0), pods, nodes, {})
    replay_sequence(cl, [FillPod.of(p) for p in pods], pol, run)
    curve = dict(run.curve)
    # arrived % thresholds are reached after p1 (66.7 %), p2 (83.3 %), p3 (116.7 %), p4 (133.3 %)
    assert curve[1] == curve[66] == pytest.approx(200 / 3, abs=1e-3)
    assert curve[67] == curve[83] == pytest.approx(250 / 3, abs=1e-3)
    assert curve[84] == curve[100] == curve[116] == pytest.approx(250 / 3, abs=1e-3)
    assert curve[117] == curve[133] == pytest.approx(100.0)
    assert max(curve) == 133
    assert run.unallocated_pct_at_100 == pytest.approx(100 / 6, abs=1e-3)
    assert run.dropped == 1
    assert [(p["pod"], p["node"], p["gpu_milli"]) for p in run.placements] == [
        ("p1", "a", 1000), ("p2", "b", 500), ("p4", "b", 500)]
    assert run.placements[0]["gpus"] == [0, 1] and run.placements[1]["gpus"] == [0]
    assert check_placements(nodes, pods, run.placements) == []


def test_sequence_shuffles_by_name_and_inflates(tmp_path):
    nodes, pods = _tiny(tmp_path)
    seq = fill_sequence(list(reversed(pods)), 3000, seed=7, inflate=1.3)
    assert sorted(p.name for p in seq[:4]) == ["p1", "p2", "p3", "p4"]
    requested = sum(p.total for p in seq)
    assert requested >= 1.3 * 3000
    assert requested - seq[-1].total < 1.3 * 3000  # stops as soon as the target is reached
    assert all(p.name.split("-copy")[0] in {"p1", "p2", "p3", "p4"} for p in seq[4:])
    assert len({p.name for p in seq}) == len(seq)
    assert [p.name for p in fill_sequence(pods, 3000, 7, 1.3)] == [p.name for p in seq]


@pytest.mark.parametrize("policy", FILL_POLICIES)
def test_deterministic_and_rechecked_on_generated_traces(tmp_path, policy):
    for trace_seed in (1, 2):
        d = tmp_path / str(trace_seed)
        d.mkdir()
        np, pp = random_trace(d, trace_seed)
        nodes, pods = read_nodes(np), read_pods(pp)
        a = run_fill(nodes, pods, policy=policy, seed=5)
        b = run_fill(nodes, pods, policy=policy, seed=5)
        assert a.placements == b.placements and a.curve == b.curve
        assert a.placements, "something must be placed"
        assert check_placements(nodes, pods, a.placements) == []
        assert a.unallocated_pct_at_100 is not None


def test_recheck_finds_over_allocation_and_type_violations(tmp_path):
    nodes, pods = _tiny(tmp_path)
    bad = [
        {"pod": "p2", "node": "b", "gpus": [0], "gpu_milli": 500},
        {"pod": "p4", "node": "b", "gpus": [0], "gpu_milli": 500},
        {"pod": "p4-copy1", "node": "b", "gpus": [0], "gpu_milli": 500},  # 1500 on one card
        {"pod": "p3", "node": "a", "gpus": [5], "gpu_milli": 1000},  # no card 5
    ]
    problems = check_placements(nodes, pods, bad)
    assert any("over-allocated" in p for p in problems)
    assert any("out of range" in p for p in problems)
    wrong_type = [{"pod": "p2", "node": "a", "gpus": [0], "gpu_milli": 500}]
    assert any("not in" in p for p in check_placements(nodes, pods, wrong_type))


def test_cluster_refuses_over_allocation(tmp_path):
    nodes, _ = _tiny(tmp_path)
    cl = FillCluster(nodes)
    big = FillPod("x", 100, 10, 1, 700, None)
    cl.place(1, [0], big)
    with pytest.raises(AssertionError):
        cl.place(1, [0], big)


def test_bestfit_and_gpuq_prefer_the_partly_used_card(tmp_path):
    nodes = read_nodes(write_nodes(tmp_path / "n.csv", [("a", 64000, 10**6, 2, "G2"),
                                                        ("b", 64000, 10**6, 2, "G2")]))
    pods = read_pods(write_pods(tmp_path / "p.csv", [
        ("w", 1000, 10, 1, 1000, "", "", "", 0, 0, 0),
        ("s1", 1000, 10, 1, 500, "", "", "", 0, 0, 0),
        ("s2", 1000, 10, 1, 500, "", "", "", 0, 0, 0),
    ]))
    for policy in ("bestfit", "gpuq", "fgd"):
        cl = FillCluster(nodes)
        pol = make_policy(policy, random.Random(0), pods, nodes, {})
        s1, s2 = FillPod.of(pods[1]), FillPod.of(pods[2])
        i, g = pol.choose(s1, cl)
        cl.place(i, g, s1)
        j, h = pol.choose(s2, cl)
        assert (j, h) == (i, g), policy  # the second half goes on the same card


def test_summarize_takes_medians():
    runs = []
    for seed, alloc in ((1, 90.0), (2, 96.0), (3, 94.0)):
        runs.append(FillRun(seed=seed, policy="gpuq", total_gpus=10,
                            curve=[(99, alloc - 1), (100, alloc)]))
    doc = summarize(runs)
    assert doc["unallocated_pct_at_100"] == 6.0
    assert doc["curve"] == [{"arrived_pct": 99, "allocation_pct": 93.0},
                            {"arrived_pct": 100, "allocation_pct": 94.0}]
    assert [s["seed"] for s in doc["per_seed"]] == [1, 2, 3]


def test_parse_seeds():
    assert parse_seeds("42..45", 0) == [42, 43, 44, 45]
    assert parse_seeds("1,3", 0) == [1, 3]
    assert parse_seeds(None, 9) == [9]
    with pytest.raises(ValueError):
        parse_seeds("5..1", 0)


def test_command_writes_api_result_and_report(tmp_path):
    np, pp = random_trace(tmp_path, 3)
    scen = tmp_path / "s.yaml"
    scen.write_text(f"trace: {{format: alibaba-openb, nodes: {np.name}, pods: {pp.name}}}\n")
    out = tmp_path / "r.json"
    rc = run_fill_command(str(scen), policy="gpuq", seed=1, seeds="1..3", inflate=1.3,
                          out=str(out), report=str(tmp_path / "rep"))
    assert rc == 0
    doc = json.loads(out.read_text())
    assert doc["protocol"] == "fill" and doc["policy"] == "gpuq" and doc["seeds"] == [1, 2, 3]
    for key in ("total_gpus", "unallocated_pct_at_100", "curve", "per_seed"):
        assert key in doc
    p = doc["per_seed"][0]["placements"][0]
    assert set(p) == {"pod", "node", "gpus", "gpu_milli"}
    assert (tmp_path / "rep" / "report.md").exists()
    assert (tmp_path / "rep" / "fill_unallocated.png").stat().st_size > 1000


def test_command_rejects_bad_input(tmp_path, capsys):
    scen = tmp_path / "s.yaml"
    scen.write_text("trace: {format: alibaba-openb, nodes: nope.csv, pods: nope.csv}\n")
    assert run_fill_command(str(scen), policy="gpuq", seed=1, seeds=None, inflate=1.3,
                            out=None, report=None) == 2
    assert "trace.nodes" in capsys.readouterr().err
    assert run_fill_command(str(scen), policy="nope", seed=1, seeds=None, inflate=1.3,
                            out=None, report=None) == 2
    assert run_fill_command(str(scen), policy="gpuq", seed=1, seeds="9..1", inflate=1.3,
                            out=None, report=None) == 2


def test_fill_gpuq_is_the_live_core(tmp_path):
    """``--policy gpuq`` takes exactly what ``place_job`` returns on the same ClusterState."""

    np_, pp = random_trace(tmp_path, 5, n_nodes=8, n_pods=60)
    nodes, pods = read_nodes(np_), read_pods(pp)
    pol = make_policy("gpuq", random.Random(0), pods, nodes, {})
    assert isinstance(pol, CorePolicy) and pol.name == "gpuq"
    twin = ClusterState([copy.deepcopy(n) for n in pol.state.nodes.values()], pol.types)
    cl = FillCluster(nodes)
    placed = []
    for pod in fill_sequence(pods, cl.capacity_milli, 7, 1.3):
        job = pol.job_of(pod)
        direct = place_job(job, twin, pol.ctx)
        choice = pol.choose(pod, cl)
        if direct is None:
            assert choice is None
            continue
        (p,) = direct
        twin.apply(p)
        assert choice == (pol.node_index[p.node], list(p.devices))
        cl.place(choice[0], choice[1], pod)
        placed.append({"pod": pod.name, "node": p.node, "gpus": list(p.devices),
                       "gpu_milli": pod.milli})
    assert len(placed) > 20
    assert check_placements(nodes, pods, placed) == []


def test_fill_has_no_second_placement_engine():
    assert FILL_POLICIES == ("random", "bestfit", "fgd", "gpuq")  # gpuq = the live core

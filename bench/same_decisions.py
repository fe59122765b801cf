"""Same decisions before and after a change to the core: run one code tree, write
every decision it takes on a fixed set of cases, then compare two such files.

    python bench/same_decisions.py run --code OLD_TREE --out old.json --traces DIR
    python bench/same_decisions.py run --code .        --out new.json --traces DIR
    python bench/same_decisions.py compare old.json new.json

``--code`` is the root of a checkout (e.g. ``git archive <commit> | tar -x -C
/tmp/old``); its ``app`` package is imported (``gpuq`` in a tree of the time it had
that name: ``package_alias.py``), so the cases run the old or the new core with this one
script. The cases (``--quick`` runs the first three):

* ``cycles``: 400 random snapshots (several request modes, gangs, teams at
  and under quota, P0/P1/P2, pools with guarantees, cordoned nodes, running
  jobs), three cycles each with the decisions fed back as the dispatcher does:
  every admission, placement, preemption, reason (text and code) compared;
* ``whatif``: the tuner's what-if replay (``simulate_forward``) of random
  states and arrivals at two sets of weights;
* ``preempt``: the preemption benchmark's full cluster, 120 P0 jobs;
* ``philly``: ``gpuq simulate`` of the Philly day (with and without
  estimates) for gpuq and the baselines, the whole result JSON;
* ``fill``: the FGD fill protocol on the Alibaba traces for the live core
  (default, seeds 42..43; gpushare100, seed 42), every placement;
* ``suite``: one scenario of the suite (``eval/suite/philly-2d-0.8.yaml``), gpuq.

Each case is stored as its SHA-256 and a few figures; ``compare`` prints
equal/different per case and, for the random cycles, which snapshots differ.
The tree being measured is printed with the machine (2 shared cores here).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import platform
import random
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


def _digest(obj: Any) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def _result_doc(res: Any) -> dict[str, Any]:
    from app.scheduling.model import CycleResult  # noqa: F401  (the tree's own)

    def code(r: Any) -> str | None:
        c = getattr(r, "code", None)
        return None if c is None else str(c)

    return {
        "admissions": [[a.job_id, [repr(p) for p in a.placements], repr(a.leases), list(a.notes)]
                       for a in res.admissions],
        "preemptions": [[p.job_id, str(p.reason), code(p.reason), p.by_job, p.kind]
                        for p in res.preemptions],
        "reasons": {k: [str(v), code(v)] for k, v in sorted(res.reasons.items())},
        "unschedulable": {k: [str(v), code(v)] for k, v in sorted(res.unschedulable.items())},
        "order": list(res.order),
        "returned": [repr(x) for x in res.returned],
    }


def _script_module(path: str) -> Any:
    """A module of this script's tree (not of ``--code``'s), by file: it builds objects of
    the measured tree's ``gpuq``, so both trees run the same setup."""
    spec = importlib.util.spec_from_file_location(Path(path).stem, ROOT / path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# -- random snapshots ----------------------------------------------------------------


def _random_snapshot_cycles(seed: int) -> list[dict[str, Any]]:
    from app.scheduling.engine import schedule
    from app.scheduling.model import (
        Device,
        GpuType,
        JobRequest,
        MigProfile,
        Node,
        PoolInfo,
        PriorityInfo,
        RunningJob,
        SchedulerConfig,
        Snapshot,
        TeamInfo,
    )

    rng = random.Random(seed)
    a100 = GpuType("a100", 80, 10, mig_profiles={
        "3g.40gb": MigProfile("3g.40gb", 40, 0.4286), "1g.10gb": MigProfile("1g.10gb", 10, 0.1429)})
    types = {"a100": a100, "v100": GpuType("v100", 16, 4),
             "rtx": GpuType("rtx", 24, 2, shareable=True)}
    prios = {"P0": PriorityInfo("P0", 1000, False), "P1": PriorityInfo("P1", 500, True),
             "P2": PriorityInfo("P2", 100, True)}
    nodes = []
    for i in range(rng.randint(2, 8)):
        t = rng.choice(["a100", "v100", "rtx", "rtx", None])
        gpus = 0 if t is None else rng.choice([2, 4, 8])
        devs = []
        for d in range(gpus):
            lay: tuple[str, ...] = ()
            if t == "a100" and rng.random() < 0.2:
                lay = rng.choice([("3g.40gb", "3g.40gb"), ("1g.10gb",) * 7])
            devs.append(Device(d, mig_layout=lay))
        nodes.append(Node(f"n{i}", t, devs, cpu=rng.choice([16, 64]), memory_gb=256,
                          rack=rng.choice(["r1", "r2"]), network=rng.choice(["eth", "ib"]),
                          schedulable=rng.random() > 0.1))
    quota = rng.choice([None, 20.0, 40.0, 80.0])
    teams = {"x": TeamInfo("x", "p", quota_units=quota,
                           quota_by_type=rng.choice([{}, {"a100": 30.0}])),
             "y": TeamInfo("y", "p", weight=2.0),
             "z": TeamInfo("z", "q", allowed_pools=("p",), quota_units=rng.choice([None, 16.0]))}
    pools = {"p": PoolInfo("p"),
             "q": PoolInfo("q", gpu_types=("v100", "rtx"),
                           guaranteed=rng.choice([{}, {"v100": 8.0}]))}
    cfg = SchedulerConfig(
        reservation_after_s=rng.choice([0.0, 300.0, 1e9]),
        fair_horizon_s=rng.choice([600.0, 86400.0]),
        fair_preemption=rng.random() < 0.7,
        min_run_time_s=rng.choice([0.0, 60.0]),
        max_cycle_admissions=rng.choice([100_000, 3]),
        shortest_first=rng.random() < 0.5,
    )

    def make_job(idx: int, now: float) -> JobRequest:
        mode = rng.choice(["gpus", "gpus", "gpus", "gpu_units", "mig", "gpu_share"])
        kw: dict[str, Any] = {"gpus": None}
        if mode == "gpus":
            kw["gpus"] = rng.choice([0, 1, 1, 2, 4, 8])
        elif mode == "gpu_units":
            kw["gpu_units"] = rng.choice([4.0, 10.0, 20.0, 40.0])
            kw["allow_mixed_types"] = rng.random() < 0.5
        elif mode == "mig":
            kw["mig"] = rng.choice(["auto", "3g.40gb", "1g.10gb"])
        else:
            kw["gpu_share"] = rng.choice([0.25, 0.5])
        replicas = 1 if mode == "gpu_units" else rng.choice([1, 1, 2, 3])
        prio = rng.choice(["P0", "P1", "P1", "P2"])
        team = rng.choice(["x", "x", "y", "z"])
        return JobRequest(
            id=f"j{idx}", name=f"j{idx}", team=team, pool=teams[team].pool, priority=prio,
            priority_value=prios[prio].value, preemptible=prios[prio].preemptible,
            submitted_at=now - rng.choice([0.0, 100.0, 2000.0]), replicas=replicas,
            min_available=rng.randint(1, replicas),
            min_gpu_memory_gb=rng.choice([0, 0, 20, 40]),
            gpu_types=rng.choice([(), (), ("a100",), ("v100", "rtx")]),
            cpu=rng.choice([1, 4, 20]), memory_gb=rng.choice([1, 16]),
            placement=rng.choice(["binpack", "spread"]),
            topology=rng.choice(["none", "none", "same_node", "same_rack"]),
            duration_estimate_s=rng.choice([None, 60.0, 5000.0]),
            **kw,
        )

    running: list[RunningJob] = []
    pending: list[JobRequest] = []
    out = []
    idx = 0
    now = 5000.0
    for _ in range(3):
        for _ in range(rng.randint(2, 12)):
            pending.append(make_job(idx, now))
            idx += 1
        snap = Snapshot(now, types, nodes, pools, teams, prios, list(running), list(pending), cfg)
        res = schedule(snap)
        out.append(_result_doc(res))
        stopped = {p.job_id for p in res.preemptions}
        requeued = [r.request for r in running if r.request.id in stopped]
        running = [r for r in running if r.request.id not in stopped]
        by_id = {j.id: j for j in pending}
        for a in res.admissions:
            running.append(RunningJob(by_id[a.job_id], a.placements, now))
        done = {a.job_id for a in res.admissions} | set(res.unschedulable)
        pending = [j for j in pending if j.id not in done] + requeued
        running = [r for r in running if rng.random() < 0.8]
        now += 100.0
    return out


def case_cycles(_args: argparse.Namespace) -> dict[str, Any]:
    per = {}
    for seed in range(400):
        per[str(seed)] = _digest(_random_snapshot_cycles(seed))
    return {"per_seed": per}


def case_whatif(_args: argparse.Namespace) -> dict[str, Any]:
    from app.scheduling.engine import schedule
    from app.scheduling.model import JobRequest, TeamInfo
    from app.tuning.whatif import Arrival, simulate_forward, with_weights

    fx = _script_module("tests/unit/core_fixtures.py")
    PRIOS, TWO_TYPES, job, node, snap = fx.PRIOS, fx.TWO_TYPES, fx.job, fx.node, fx.snap

    out = {}
    for seed in range(30):
        rng = random.Random(1000 + seed)
        nodes = [node(f"n{i}", rng.choice(["a100", "v100"]), 8)
                 for i in range(rng.randint(2, 5))]
        teams = {"nlp": TeamInfo("nlp", "p", quota_units=rng.choice([None, 40.0])),
                 "cv": TeamInfo("cv", "p")}

        def req(i: int, sub: float, rng: random.Random = rng) -> JobRequest:
            return job(str(i), name=f"j{i}", team=rng.choice(["nlp", "cv"]), submitted_at=sub,
                       gpus=rng.choice([1, 2, 4]),
                       gpu_types=rng.choice([(), ("v100",), ("a100",)]),
                       duration_estimate_s=rng.choice([100.0, 600.0, 3000.0]))

        pending = [req(i, 0.0) for i in range(rng.randint(3, 20))]
        arrivals = [Arrival(rng.uniform(0, 600), req(100 + i, 0.0), rng.uniform(60, 900))
                    for i in range(rng.randint(0, 10))]
        start = snap(nodes, pending, teams=teams, types=TWO_TYPES,
                     priorities={"P1": PRIOS["P1"]})
        res = []
        for weights in ({}, {"a100": 6.0, "v100": 3.0}):
            o = simulate_forward(with_weights(start, weights), arrivals, policy=schedule)
            res.append([o.wait_p99_s, sorted(o.team_p99_s.items()), o.jobs])
        out[str(seed)] = res
    return {"per_seed": {k: _digest(v) for k, v in out.items()}, "values": out}


def case_preempt(_args: argparse.Namespace) -> dict[str, Any]:
    sys.path.insert(0, str(ROOT / "bench"))
    import preemption as pb  # bench/preemption.py of this script's tree (same build())

    from app.scheduling.engine import schedule

    res = schedule(pb.build(150, 120, "P0"))
    doc = _result_doc(res)
    return {"digest": _digest(doc), "admitted": len(res.admissions),
            "victims": len(res.preemptions)}


def _simulate(args: argparse.Namespace, scenario: str, policy: str, **kw: Any) -> dict[str, Any]:
    from app.simulate.command import run_simulate

    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "r.json")
        t0 = time.process_time()
        rc = run_simulate(str(ROOT / scenario), policy=policy, out=out,
                          trace_dir=args.traces, **kw)
        cpu = time.process_time() - t0
        doc = json.loads(Path(out).read_text()) if rc == 0 else {"rc": rc}
    doc.pop("meta", None)
    summary = doc.get("summary", {})
    figures = {k: summary.get(k) for k in ("finished", "wait_p99_s", "jct_mean_s", "cycles",
                                           "unallocated_pct_median") if k in summary}
    return {"digest": _digest(doc), "figures": figures, "cpu_s": round(cpu, 1)}


def case_philly(args: argparse.Namespace) -> dict[str, Any]:
    out = {}
    for scen in ("eval/philly-day.yaml", "eval/philly-day-estimates.yaml"):
        out[f"{scen} gpuq"] = _simulate(args, scen, "gpuq")
    for pol in ("kueue", "volcano", "slurm", "fifo-typed"):
        out[f"eval/philly-day.yaml {pol}"] = _simulate(args, "eval/philly-day.yaml", pol)
    return out


def case_fill(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "default gpuq 42..43": _simulate(args, "eval/openb-default.yaml", "gpuq",
                                         protocol="fill", seeds="42..43"),
        "gpushare100 gpuq 42": _simulate(args, "eval/openb-gpushare100.yaml", "gpuq",
                                         protocol="fill", seeds="42"),
    }


def case_suite(args: argparse.Namespace) -> dict[str, Any]:
    return {"philly-2d-0.8 gpuq": _simulate(args, "eval/suite/philly-2d-0.8.yaml", "gpuq")}


CASES = {"cycles": case_cycles, "whatif": case_whatif, "preempt": case_preempt,
         "philly": case_philly, "fill": case_fill, "suite": case_suite}


def run(args: argparse.Namespace) -> None:
    code = Path(args.code).resolve()
    sys.path.insert(0, str(code))
    from package_alias import alias_old_package  # the tree may be of the package's gpuq days

    pkg = importlib.import_module(alias_old_package(code))
    assert Path(str(pkg.__file__)).resolve().is_relative_to(code), pkg.__file__
    print(f"code: {code}; machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"load {os.getloadavg()[0]:.1f}", flush=True)
    names = list(CASES)[:3] if args.quick else (args.cases.split(",") if args.cases else CASES)
    doc: dict[str, Any] = {"code": str(code)}
    for name in names:
        t0 = time.process_time()
        doc[name] = CASES[name](args)
        print(f"  {name}: {time.process_time() - t0:.1f} CPU s", flush=True)
    Path(args.out).write_text(json.dumps(doc, indent=1, sort_keys=True))


def compare(a_path: str, b_path: str) -> int:
    a, b = json.loads(Path(a_path).read_text()), json.loads(Path(b_path).read_text())
    bad = 0
    for name in CASES:
        if name not in a or name not in b:
            if name in a or name in b:  # run in one tree only: say so, not a silent pass
                where = a_path if name in a else b_path
                print(f"{name}: NOT COMPARED, only in {where} (run both with the same --cases)")
            continue
        x, y = a[name], b[name]
        if "per_seed" in x:
            diff = [s for s in x["per_seed"] if x["per_seed"][s] != y["per_seed"].get(s)]
            print(f"{name}: {len(x['per_seed']) - len(diff)}/{len(x['per_seed'])} equal"
                  + (f"; differ: {', '.join(diff)}" if diff else ""))
            bad += bool(diff)
            continue
        for key in sorted(set(x) | set(y)):
            xa, ya = x.get(key), y.get(key)
            if isinstance(xa, dict) and "digest" in xa:
                same = xa["digest"] == (ya or {}).get("digest")
                print(f"{name} {key}: {'equal' if same else 'DIFFERENT'} {xa.get('figures')} "
                      f"cpu {xa.get('cpu_s')} / {(ya or {}).get('cpu_s')}")
            else:
                same = key in ("digest",) and xa == ya or xa == ya
                print(f"{name} {key}: {'equal' if same else 'DIFFERENT'} {xa} / {ya}")
            bad += not same
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--code", default=str(ROOT))
    r.add_argument("--out", required=True)
    r.add_argument("--traces", default=os.environ.get("GPUQ_TRACE_DIR"))
    r.add_argument("--quick", action="store_true")
    r.add_argument("--cases", default=None, help="comma-separated subset of " + ",".join(CASES))
    c = sub.add_parser("compare")
    c.add_argument("a")
    c.add_argument("b")
    args = ap.parse_args()
    if args.cmd == "run":
        run(args)
        return 0
    return compare(args.a, args.b)


if __name__ == "__main__":
    sys.exit(main())

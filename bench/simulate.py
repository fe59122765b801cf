"""Simulator throughput: events per second on the Alibaba (fill protocol and timed
replay) and Philly (timed replay) traces, gpuq against a baseline in the same run.

    .venv/bin/python bench/simulate.py eval/traces [--pods 2000] [--hours 12]

Events: in the fill protocol one event is one pod offered to the policy; in a
replay, one arrival, finish or failure (cycles are reported beside them).
The traces folder is an argument (the repository does not ship the traces).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from datetime import datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.domain.config import GpuqConfig  # noqa: E402
from app.simulate.alibaba import (  # noqa: E402
    gpu_type_configs,
    node_configs,
    pod_job_spec,
    read_nodes,
    read_pods,
)
from app.simulate.all_policies import POLICIES  # noqa: E402
from app.simulate.fill import run_fill  # noqa: E402
from app.simulate.philly import build_scenario, read_jobs  # noqa: E402
from app.simulate.replay import ScenarioModel, Simulator  # noqa: E402


def _replay(model: ScenarioModel, policy: str) -> tuple[int, int, float]:
    sim = Simulator(model, POLICIES[policy], policy)
    t = time.perf_counter()
    res = sim.run()
    dt = time.perf_counter() - t
    events = sum(1 for e in res.events if e["type"] in ("finish", "fail")) + len(res.jobs)
    return events, res.cycles, dt


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("traces", help="folder with alibaba-gpu-2023/ and philly/")
    ap.add_argument("--pods", type=int, default=2000, help="openb pods in the timed replay")
    ap.add_argument("--hours", type=float, default=12.0, help="Philly window")
    a = ap.parse_args()
    root = Path(a.traces)
    ali = root / "alibaba-gpu-2023"
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores (shared), "
          f"Python {platform.python_version()}")
    nodes = read_nodes(ali / "openb_node_list_gpu_node.csv")
    pods = read_pods(ali / "openb_pod_list_default.csv")
    print("\nAlibaba openb, fill protocol (1 seed, inflate 1.3; event = one pod offered)")
    for policy in ("bestfit", "fgd", "gpuq"):
        t = time.perf_counter()
        run = run_fill(nodes, pods, policy=policy, seed=42)
        dt = time.perf_counter() - t
        print(f"  {policy:19s} {run.pods:6d} events in {dt:6.2f} s = {run.pods / dt:8.0f} events/s"
              f"   (unallocated at 100%: {run.unallocated_pct_at_100:.2f} %)")

    print(f"\nAlibaba openb, timed replay of the first {a.pods} pods by creation time")
    first = sorted((p for p in pods if p.creation_time is not None),
                   key=lambda p: p.creation_time)[: a.pods]
    t0 = first[0].creation_time if first else 0.0
    specs = []
    for p in first:
        js = pod_job_spec(p, team="openb", pool="default")
        specs.append(js.model_copy(update={"submit_at_s": (p.creation_time or t0) - t0}))
    cfg = GpuqConfig.model_validate({
        "gpu_types": [t.model_dump() for t in gpu_type_configs({n.model for n in nodes})],
        "nodes": [n.model_dump(exclude_none=True) for n in node_configs(nodes)],
        "pools": [{"name": "default"}], "teams": [{"name": "openb", "pool": "default"}],
    })
    for policy in ("fifo-typed", "gpuq"):
        ev, cycles, dt = _replay(ScenarioModel(ScenarioModel.from_config(cfg).cluster, specs),
                                 policy)
        print(f"  {policy:19s} {ev:6d} events, {cycles:5d} cycles in {dt:6.2f} s = "
              f"{ev / dt:8.0f} events/s")

    print(f"\nPhilly, timed replay of {a.hours:g} h from 2017-10-09 (load 1.5)")
    doc = build_scenario(read_jobs(root / "philly" / "philly_sia_processed.csv"),
                         start=datetime(2017, 10, 9), hours=a.hours, load=1.5)
    doc.pop("_meta")
    model = ScenarioModel.from_config(GpuqConfig.model_validate(doc))
    for policy in ("fifo-typed", "gpuq"):
        ev, cycles, dt = _replay(model, policy)
        print(f"  {policy:19s} {ev:6d} events, {cycles:5d} cycles in {dt:6.2f} s = "
              f"{ev / dt:8.0f} events/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

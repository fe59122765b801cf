"""Timed replay of the Alibaba 2023 ("openb") trace, sized to a load.

The trace spans about 150 days but nearly all pods arrive in its last 35
(days 115-149 after the first creation time). A window ``[start_day,
start_day + days)`` of creation times is replayed with one documented rule:

* submit = creation time - window start; run time = deletion time minus the
  scheduled time (the creation time for pods never scheduled), at least 1 s
  and capped at ``max_runtime_s`` (2 days: long-running services become
  long batch jobs);
* team = the pod's QoS class (``ls``, ``be``, ``burstable``,
  ``guaranteed``), the trace's only grouping of pods;
* requests as :func:`app.simulate.alibaba.pod_job_spec` (``gpu_milli`` ->
  ``gpu_share``, ``gpu_spec`` -> ``gpu_types``, CPU and memory as is);
* speed of a GPU type = its CU weight (the reader's table: relative
  throughput, T4 = 1), so a job runs ``runtime / weight`` on a type;
* cluster: the same fraction of each model's nodes (at least one node of
  every model), first by name, the fraction chosen so that the window's GPU
  work at speed keeps the kept nodes busy ``load`` of the window.

Usage: ``python -m app.simulate.alibaba_timed NODES.csv PODS.csv --start-day 118
--days 2 --load 1.0 --out eval/alibaba-2d-1.0.yaml``.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from app.simulate.alibaba import (
    GPU_MODELS,
    TraceNode,
    TracePod,
    gpu_type_configs,
    node_configs,
    pod_job_spec,
    read_nodes,
    read_pods,
)
from app.simulate.philly import write_scenario

DAY = 86400.0


def run_time(p: TracePod, max_runtime_s: float) -> float:
    begin = p.scheduled_time if p.scheduled_time else (p.creation_time or 0.0)
    end = p.deletion_time if p.deletion_time is not None else begin + 3600.0
    return max(1.0, min(end - begin, max_runtime_s))


def build_timed_scenario(
    nodes: list[TraceNode],
    pods: list[TracePod],
    *,
    start_day: float = 118.0,
    days: float = 2.0,
    load: float = 1.0,
    max_runtime_s: float = 2 * DAY,
) -> dict[str, Any]:
    """A scenario dict (config + jobs) for the window, on a cluster sized for ``load``."""
    if not 0 < load <= 5:
        raise ValueError("load must be in (0, 5]")
    if days <= 0:
        raise ValueError("days must be > 0")
    t0 = min((p.creation_time for p in pods if p.creation_time is not None), default=0.0)
    lo = t0 + start_day * DAY
    hi = lo + days * DAY
    picked = [p for p in pods if p.creation_time is not None and lo <= p.creation_time < hi]
    gpu_nodes = sorted((n for n in nodes if n.gpus > 0 and n.model in GPU_MODELS),
                       key=lambda n: n.name)
    speed = {m: GPU_MODELS[m].weight for m in {n.model for n in gpu_nodes}}
    work = sum(p.num_gpu * p.gpu_milli / 1000.0 * run_time(p, max_runtime_s) for p in picked)
    full = sum(n.gpus * speed[n.model] for n in gpu_nodes) * days * DAY
    frac = min(1.0, work / (load * full)) if full > 0 else 1.0
    kept: list[TraceNode] = []
    for m in sorted(speed):
        of_model = [n for n in gpu_nodes if n.model == m]
        kept.extend(of_model[: max(1, math.ceil(frac * len(of_model)))])
    types = {GPU_MODELS[m].type_name: GPU_MODELS[m].weight for m in speed}
    specs = []
    for p in picked:
        js = pod_job_spec(p, team=(p.qos or "default").lower(), pool="shared")
        specs.append(js.model_copy(update={
            "submit_at_s": round(p.creation_time - lo, 3),  # type: ignore[operator]
            "runtime_s": run_time(p, max_runtime_s),
            "speed": dict(types),
        }).model_dump(exclude_none=True))
    teams = sorted({s["team"] for s in specs})
    return {
        # the operator's speed per type (GpuType.speed) = the jobs' own table
        "gpu_types": [{**t.model_dump(), "speed": types.get(t.name, 1.0)}
                      for t in gpu_type_configs(set(speed))],
        "nodes": [n.model_dump(exclude_none=True) for n in node_configs(kept)],
        "pools": [{"name": "shared"}],
        "teams": [{"name": t, "pool": "shared"} for t in teams],
        "scheduler": {},
        "jobs": specs,
        "_meta": {
            "window_start_day": start_day,
            "days": days,
            "load": load,
            "jobs_in_window": len(picked),
            "nodes_kept": len(kept),
            "gpus_kept": sum(n.gpus for n in kept),
            "gpu_seconds": round(work, 1),
        },
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("nodes")
    ap.add_argument("pods")
    ap.add_argument("--start-day", type=float, default=118.0)
    ap.add_argument("--days", type=float, default=2.0)
    ap.add_argument("--load", type=float, default=1.0)
    ap.add_argument("--max-runtime-s", type=float, default=2 * DAY)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    doc = build_timed_scenario(read_nodes(a.nodes), read_pods(a.pods), start_day=a.start_day,
                               days=a.days, load=a.load, max_runtime_s=a.max_runtime_s)
    write_scenario(doc, a.out)
    meta = doc["_meta"]
    print(f"{len(doc['jobs'])} jobs, {meta['nodes_kept']} nodes ({meta['gpus_kept']} GPUs) "
          f"-> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

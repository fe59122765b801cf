"""What was simulated, for the result's ``scenario`` field and the report's header.

A report that does not say which cluster, load, window and policy it is about
cannot be compared with another one. :func:`describe` reads them off the
scenario (the model the simulator replayed and, for a trace, the trace's
options): per GPU type the nodes, cards and capacity in CU; the jobs, teams
and the submit window; the offered load, i.e. the GPU-time the jobs ask for
over the GPU-time the cluster has during the submit window (whole cards as
asked, a MIG slice or a share as its fraction of a card, a ``gpu_units`` job
as CU over the cluster's mean CU per card), next to the ``load`` a trace
builder was asked for.
"""

from __future__ import annotations

from collections import defaultdict
from statistics import median
from typing import Any

from app.domain.config import GpuqConfig
from app.domain.spec import JobSpec
from app.simulate.replay import DEFAULT_RUNTIME_S, ScenarioModel


def _cards(spec: JobSpec, cu_per_card: float, mig_fraction: dict[str, float]) -> float:
    r = spec.resources
    n = spec.replica_count
    if r.gpus is not None:
        return float(r.gpus * n)
    if r.gpu_share is not None:
        return r.gpu_share * n
    if r.mig is not None:
        return mig_fraction.get(r.mig, 1.0) * n
    return (r.gpu_units or 0.0) / cu_per_card if cu_per_card else 0.0


def describe(model: ScenarioModel, cfg: GpuqConfig | None = None,
             path: str | None = None) -> dict[str, Any]:
    """The ``scenario`` field of a simulation result (see the module docstring)."""
    c = model.cluster
    per_type: dict[str, dict[str, float]] = defaultdict(lambda: {"nodes": 0, "cards": 0})
    for n in c.nodes:
        if n.gpu_type and n.gpu_type in c.gpu_types and n.devices:
            per_type[n.gpu_type]["nodes"] += 1
            per_type[n.gpu_type]["cards"] += len(n.devices)
    cluster = {
        t: {"nodes": int(v["nodes"]), "cards": int(v["cards"]),
            "capacity_cu": round(v["cards"] * c.gpu_types[t].weight, 3)}
        for t, v in sorted(per_type.items())
    }
    cards = sum(v["cards"] for v in cluster.values())
    speed = {t: median([sp.speed.get(t, 1.0) for sp in model.specs] or [1.0]) for t in cluster}
    speed_cards = sum(v["cards"] * speed[t] for t, v in cluster.items())
    capacity = sum(v["capacity_cu"] for v in cluster.values())
    mig_fraction = {name: p.compute_fraction for t in c.gpu_types.values()
                    for name, p in t.mig_profiles.items()}
    submits = [s.submit_at_s or 0.0 for s in model.specs]
    first, last = (min(submits), max(submits)) if submits else (0.0, 0.0)
    window_s = last - first
    asked = sum(_cards(s, capacity / cards if cards else 0.0, mig_fraction)
                * (s.runtime_s or DEFAULT_RUNTIME_S) for s in model.specs)
    info: dict[str, Any] = {
        "file": path,
        "cluster": cluster,
        "nodes": sum(v["nodes"] for v in cluster.values()),
        "cards": cards,
        "capacity_cu": round(capacity, 3),
        "pools": len(c.pools),
        "teams": len({s.team for s in model.specs}),
        "jobs": len(model.specs),
        "submit_window_s": [round(first, 3), round(last, 3)],
        "offered_load": (round(asked / (speed_cards * window_s), 2)
                         if speed_cards and window_s > 0 else None),
    }
    if cfg is not None and cfg.trace is not None:
        info["trace"] = {"format": cfg.trace.format, **dict(cfg.trace.options)}
    return info


def header_lines(info: dict[str, Any] | None, policies: list[str]) -> list[str]:
    """The report header (Markdown): scenario, cluster, load, window, policy."""
    pol = ", ".join(policies)
    if not info:
        return [f"- **Policy:** {pol}", "- (no scenario description in the result: "
                "written by an older gpuq)"]
    types = "; ".join(
        f"{t} {v['nodes']} nodes x {v['cards'] // max(v['nodes'], 1)} = {v['cards']} cards, "
        f"{v['capacity_cu']:g} CU" for t, v in info["cluster"].items())
    trace = info.get("trace") or {}
    where = f"`{info['file']}`" if info.get("file") else "(unnamed)"
    if trace:
        opts = ", ".join(f"{k} {v}" for k, v in trace.items() if k != "format")
        where += f" (trace {trace['format']}: {opts})" if opts else f" (trace {trace['format']})"
    first, last = info["submit_window_s"]
    load = info.get("offered_load")
    load_text = "-" if load is None else f"{load:g}"
    if "load" in trace:
        load_text += f" (the trace window was sized for load {trace['load']})"
    return [
        f"- **Scenario:** {where}",
        f"- **Cluster:** {info['nodes']} nodes, {info['cards']} GPUs, "
        f"{info['capacity_cu']:g} CU in {info['pools']} pool(s): {types}",
        f"- **Load:** offered {load_text}: {info['jobs']:,} jobs of {info['teams']} teams "
        "(GPU-time asked / speed-weighted GPU-time in the submit window)",
        f"- **Window:** jobs submitted from {first / 3600:.1f} h to {last / 3600:.1f} h "
        f"({(last - first) / 3600:.1f} h)",
        f"- **Policy:** {pol}",
    ]

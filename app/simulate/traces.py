"""Scenarios whose jobs come from a trace (``trace:`` instead of ``jobs:``).

* ``format: philly``, ``path: philly.csv``, ``options: {start, offset_days, days|hours, load,
  max_gpus, max_runtime_s, estimate_factor}``: the Philly builder (:mod:`app.simulate.philly`).
  The scenario's own ``gpu_types``/``nodes``/``pools``/``teams`` are used when
  given; otherwise the builder's three-type cluster sized for ``load``.
* ``format: alibaba-openb``, ``nodes``/``pods`` CSVs: the pods replayed with
  their timestamps (submit = creation time, run time = deletion - creation)
  on the trace's GPU nodes; GPU types from the reader's model table unless
  the scenario lists ``gpu_types``. With ``options: {load, start_day, days,
  max_runtime_s}``: a window of the trace on a cluster sized for ``load``
  (:mod:`app.simulate.alibaba_timed`).

Relative paths are relative to the scenario file (docs/api.md); the scenarios under
``eval/`` read ``eval/traces/``, which ``make traces`` fills from the traces' upstream
repositories (:mod:`app.simulate.trace_fetch`, checksums in ``eval/traces/sources.csv``).
When a file is not there, it is looked up in the trace folder given by ``--trace-dir``
or ``GPUQ_TRACE_DIR`` (see :func:`trace_file`), so a scenario runs against traces kept
anywhere.
"""

from __future__ import annotations

import os
from pathlib import Path, PurePath
from typing import Any

from app.domain.config import GpuqConfig
from app.simulate.alibaba import (
    gpu_type_configs,
    node_configs,
    pod_job_spec,
    read_nodes,
    read_pods,
)
from app.simulate.alibaba_timed import build_timed_scenario
from app.simulate.philly import build_scenario, read_jobs, window
from app.simulate.replay import ScenarioModel
from app.simulate.trace_fetch import TRACES_DIR, read_sources

TRACE_DIR_ENV = "GPUQ_TRACE_DIR"


def trace_candidates(base: Path, p: str, trace_dir: str | Path | None = None) -> list[Path]:
    """Where a trace path is looked for, in order: as written (absolute) or relative to
    the scenario's folder ``base``; then, for a relative path, in the trace folder
    (``trace_dir``, else ``$GPUQ_TRACE_DIR``), first with the whole path, then with its
    leading folders dropped one by one. So ``traces/philly/x.csv`` is found
    as ``philly/x.csv`` under ``GPUQ_TRACE_DIR=/data/traces``."""
    q = Path(p)
    if q.is_absolute():
        return [q]
    out = [base / q]
    folder = trace_dir or os.environ.get(TRACE_DIR_ENV)
    if folder:
        parts = [x for x in PurePath(p).parts if x not in ("..", ".")]
        out += [Path(folder).expanduser() / Path(*parts[i:]) for i in range(len(parts))]
    return out


def _is_manifest_trace(q: Path) -> bool:
    """Whether ``q`` is one of the files ``make traces`` puts in ``eval/traces/``."""
    try:
        rel = q.resolve().relative_to(TRACES_DIR)
    except ValueError:
        return False
    return any(rel == Path(s.path) for s in read_sources())


def trace_file(base: Path, p: str | None, field: str, trace_dir: str | Path | None = None) -> Path:
    """The first existing :func:`trace_candidates` path; a ValueError naming every place
    looked at (and how to point gpuq at the traces) when none exists."""
    if not p:
        raise ValueError(f"trace.{field} is required for this format")
    tried = trace_candidates(base, p, trace_dir)
    for q in tried:
        if q.is_file():
            return q
    hint = ("" if (trace_dir or os.environ.get(TRACE_DIR_ENV)) or Path(p).is_absolute()
            else f"; pass --trace-dir DIR or set {TRACE_DIR_ENV} to the folder holding the traces")
    if any(_is_manifest_trace(q) for q in tried):
        hint += ("; the evaluation's traces are not committed: run `make traces` "
                 "(downloads them and checks their SHA-256, eval/traces/README.md)")
    raise ValueError(f"trace.{field}: file {p} not found (looked at "
                     f"{', '.join(str(q) for q in dict.fromkeys(tried))}){hint}")


# Replays of the openb trace read only its GPU nodes, and its CPU-only pods have always
# been replayed on them, for gpuq and every baseline alike; the service's default keeps
# jobs without GPUs on CPU-only nodes (SchedulerConfig.cpu_jobs_on_gpu_nodes).
OPENB_SCHEDULER = {"cpu_jobs_on_gpu_nodes": True}


def _merge(cfg: GpuqConfig, doc: dict[str, Any]) -> GpuqConfig:
    """The scenario's own cluster wins; jobs come from the trace; missing teams are added."""
    own = cfg.model_dump(exclude={"trace", "jobs"}, exclude_defaults=True)
    out = dict(doc)
    for key in ("gpu_types", "nodes", "pools", "teams", "priority_classes"):
        if own.get(key):
            out[key] = own[key]
    if own.get("scheduler"):  # the scenario's knobs over the trace's
        out["scheduler"] = {**(out.get("scheduler") or {}), **own["scheduler"]}
    if own.get("nodes") and not own.get("teams"):
        pool = (out.get("pools") or [{"name": "default"}])[0]["name"]
        out["pools"] = out.get("pools") or [{"name": pool}]
        out["teams"] = [{"name": t, "pool": pool} for t in sorted({j["team"] for j in doc["jobs"]})]
    out.pop("_meta", None)
    return GpuqConfig.model_validate(out)


def scenario_from_trace(
    cfg: GpuqConfig, base: Path, trace_dir: str | Path | None = None
) -> ScenarioModel:
    """The scenario ``cfg`` with its jobs read from its trace; relative trace paths are
    resolved by :func:`trace_file` (``base`` = the scenario file's folder)."""
    tr = cfg.trace

    def _path(base: Path, p: str | None, field: str) -> Path:
        return trace_file(base, p, field, trace_dir)

    if tr is None:
        raise ValueError("trace: missing")
    opts = dict(tr.options)
    if tr.format == "philly":
        start, hours = window(
            str(opts.get("start", "2017-10-09 00:00:00")),
            days=float(opts["days"]) if "days" in opts else None,
            hours=float(opts["hours"]) if "hours" in opts else None,
            offset_days=float(opts.get("offset_days", 0.0)),
        )
        doc = build_scenario(
            read_jobs(_path(base, tr.path, "path")),
            start=start,
            hours=hours,
            load=float(opts.get("load", 0.9)),
            max_gpus=int(opts.get("max_gpus", 16)),
            max_runtime_s=float(opts.get("max_runtime_s", 2 * 86400)),
            estimate_factor=float(opts.get("estimate_factor", 0.0)),
        )
        return ScenarioModel.from_config(_merge(cfg, doc))
    if tr.format == "alibaba-openb":
        nodes = read_nodes(_path(base, tr.nodes, "nodes"))
        pods = read_pods(_path(base, tr.pods, "pods"))
        if "load" in opts:  # a window of the trace on a cluster sized for a load
            doc = build_timed_scenario(
                nodes, pods,
                start_day=float(opts.get("start_day", 118.0)),
                days=float(opts.get("days", 2.0)),
                load=float(opts["load"]),
                max_runtime_s=float(opts.get("max_runtime_s", 2 * 86400.0)),
            )
            doc["scheduler"] = {**(doc.get("scheduler") or {}), **OPENB_SCHEDULER}
            return ScenarioModel.from_config(_merge(cfg, doc))
        t0 = min((p.creation_time or 0.0 for p in pods), default=0.0)
        specs = []
        for p in pods:
            js = pod_job_spec(p, team="openb", pool="default")
            js = js.model_copy(update={"submit_at_s": (p.creation_time or t0) - t0})
            specs.append(js.model_dump(exclude_none=True))
        doc = {
            "gpu_types": [t.model_dump() for t in gpu_type_configs({n.model for n in nodes})],
            "nodes": [n.model_dump(exclude_none=True) for n in node_configs(nodes)],
            "pools": [{"name": "default"}],
            "teams": [{"name": "openb", "pool": "default"}],
            "scheduler": dict(OPENB_SCHEDULER),
            "jobs": specs,
        }
        return ScenarioModel.from_config(_merge(cfg, doc))
    raise ValueError(f"trace.format {tr.format!r} is not supported")

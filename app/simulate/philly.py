"""Scenario builder for the Microsoft Philly trace (fairness between teams).

The processed trace (``timestamp, duration, num_gpus, gpu_time,
cluster``) has no GPU model. The builder takes a time window, uses the
``cluster`` column as the team (``c-<id>``), and applies one documented
rule (also in the README's Evaluation section):

* GPU types: ``a100-80g`` (80 GB, 10 CU), ``v100-32g`` (32 GB, 4 CU),
  ``rtx4090-24g`` (24 GB, 2.5 CU, shareable); speeds relative to the
  trace's own cards: A100 2.0, V100 1.0, RTX 4090 1.2 (``runtime_s`` is the
  trace duration, so a job runs ``duration / speed`` on a type).
* jobs with >= 8 GPUs are large-model training: ``min_gpu_memory_gb: 40``
  (A100 only), as ``gpus/8`` replicas of 8 cards (a gang);
* jobs with 2-4 GPUs: ``min_gpu_memory_gb: 32`` (A100 or V100);
* 1-GPU jobs shorter than 5 minutes are debugging sessions:
  ``gpu_share: 0.5`` (on the shareable 4090s); other 1-GPU jobs may run
  anywhere;
* jobs above ``max_gpus`` (default 16) are left out (counted in the file
  header), run times are capped at ``max_runtime_s`` (default 2 days);
* with ``estimate_factor`` f > 0 each job declares ``duration_estimate_s`` =
  f x its run time (users' estimates; backfill needs them); default none.

Cluster sizing: nodes of 8 cards in groups of 1 A100 + 1 V100 + 2 RTX 4090
nodes (41.6 speed-weighted cards per group); the number of groups is
chosen so that the window's work (sum of GPUs x duration) keeps the
cluster busy ``load`` of the time over the window, and at least enough
A100 nodes for the largest gang.

Window: ``start`` (a date in the trace) plus ``offset_days``, lasting
``days`` (or ``hours``).

Usage: ``python -m app.simulate.philly TRACE.csv --start "2017-10-09 00:00"
--days 2 --load 0.8 [--offset-days 7] --out eval/philly-2d-0.8.yaml``.
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

TYPES: list[dict[str, Any]] = [
    {"name": "a100-80g", "memory_gb": 80, "weight": 10},
    {"name": "v100-32g", "memory_gb": 32, "weight": 4},
    {"name": "rtx4090-24g", "memory_gb": 24, "weight": 2.5, "shareable": True},
]
SPEED = {"a100-80g": 2.0, "v100-32g": 1.0, "rtx4090-24g": 1.2}
GROUP = {"a100-80g": 1, "v100-32g": 1, "rtx4090-24g": 2}  # nodes of 8 cards per group
CARDS_PER_NODE = 8
TIME_FORMAT = "%Y-%m-%d %H:%M:%S"


@dataclass(frozen=True, slots=True)
class PhillyJob:
    submit: datetime
    duration: float
    gpus: int
    cluster: str


def read_jobs(path: str | Path) -> list[PhillyJob]:
    out = []
    with Path(path).open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            try:
                out.append(
                    PhillyJob(
                        datetime.strptime(row["timestamp"].strip(), TIME_FORMAT),
                        float(row["duration"]),
                        int(float(row["num_gpus"])),
                        row["cluster"].strip(),
                    )
                )
            except (KeyError, ValueError) as e:
                raise ValueError(f"{path}:{i}: bad row ({e})") from None
    out.sort(key=lambda j: (j.submit, j.cluster, j.gpus, j.duration))
    return out


def job_spec(
    j: PhillyJob, name: str, submit_s: float, max_runtime_s: float, estimate_factor: float = 0.0
) -> dict[str, Any]:
    """One trace job as a scenario job, by the rule in the module docstring."""
    runtime = max(1.0, min(j.duration, max_runtime_s))
    spec: dict[str, Any] = {
        "name": name,
        "team": f"c-{j.cluster}",
        "submit_at_s": round(submit_s, 3),
        "runtime_s": runtime,
        "speed": dict(SPEED),
    }
    if estimate_factor > 0:
        spec["duration_estimate_s"] = min(365 * 86400.0, runtime * estimate_factor)
    if j.gpus >= CARDS_PER_NODE:
        reps = math.ceil(j.gpus / CARDS_PER_NODE)
        spec["replicas"] = reps
        spec["min_available"] = reps
        spec["resources"] = {"gpus": CARDS_PER_NODE, "min_gpu_memory_gb": 40, "cpu": 32,
                             "memory_gb": 256}
    elif j.gpus >= 2:
        spec["resources"] = {"gpus": j.gpus, "min_gpu_memory_gb": 32, "cpu": 4 * j.gpus,
                             "memory_gb": 32 * j.gpus}
    elif j.gpus == 1 and j.duration < 300:
        spec["resources"] = {"gpu_share": 0.5, "cpu": 2, "memory_gb": 16}
    else:
        spec["resources"] = {"gpus": max(0, j.gpus), "cpu": 4, "memory_gb": 32}
    return spec


def build_scenario(
    jobs: list[PhillyJob],
    *,
    start: datetime,
    hours: float,
    load: float = 0.9,
    max_gpus: int = 16,
    max_runtime_s: float = 2 * 86400,
    estimate_factor: float = 0.0,
) -> dict[str, Any]:
    """A scenario dict (config + jobs) for the window [start, start + hours)."""
    if not 0 < load <= 5:
        raise ValueError("load must be in (0, 5]")
    if hours <= 0:
        raise ValueError("hours must be > 0")
    window_s = hours * 3600.0
    t0 = start.timestamp()
    picked = [j for j in jobs if 0 <= j.submit.timestamp() - t0 < window_s]
    kept = [j for j in picked if 0 < j.gpus <= max_gpus]
    specs = [
        job_spec(j, f"j{i:06d}", j.submit.timestamp() - t0, max_runtime_s, estimate_factor)
        for i, j in enumerate(kept)
    ]
    work = sum(j.gpus * min(j.duration, max_runtime_s) for j in kept)  # GPU-seconds at speed 1
    per_group = sum(GROUP[t] * CARDS_PER_NODE * SPEED[t] for t in GROUP)
    groups = max(1, math.ceil(work / (window_s * load * per_group)))
    biggest = max((math.ceil(j.gpus / CARDS_PER_NODE) for j in kept if j.gpus >= 8), default=1)
    groups = max(groups, biggest)
    nodes = [
        {"name": t.split("-")[0], "count": GROUP[t] * groups, "gpu_type": t,
         "gpus": CARDS_PER_NODE, "cpu": 128, "memory_gb": 1024}
        for t in GROUP
    ]
    teams = sorted({s["team"] for s in specs})
    return {
        # the operator's measured speed per type (GpuType.speed), the same table the
        # jobs' own (the simulator's truth) carry: every policy may read it
        "gpu_types": [{**t, "speed": SPEED[t["name"]]} for t in TYPES],
        "nodes": nodes,
        "pools": [{"name": "shared", "gpu_types": [t["name"] for t in TYPES]}],
        "teams": [{"name": t, "pool": "shared"} for t in teams],
        "scheduler": {},
        "jobs": specs,
        "_meta": {
            "window_start": start.strftime(TIME_FORMAT),
            "hours": hours,
            "load": load,
            "jobs_in_window": len(picked),
            "jobs_left_out": len(picked) - len(kept),
            "groups": groups,
            "gpu_seconds": work,
        },
    }


def window(start: str | datetime, *, days: float | None = None, hours: float | None = None,
           offset_days: float = 0.0) -> tuple[datetime, float]:
    """(window start, hours) from a start date, an offset in days and a length in days or
    hours (``days`` wins; default one day)."""
    t = start if isinstance(start, datetime) else datetime.fromisoformat(str(start))
    length = 24.0 * days if days is not None else (hours if hours is not None else 24.0)
    return t + timedelta(days=offset_days), float(length)


def write_scenario(doc: dict[str, Any], out: str | Path) -> None:
    meta = doc.pop("_meta")
    header = "".join(f"# {k}: {v}\n" for k, v in meta.items())
    text = (
        "# Philly trace window built by app.simulate.philly (rule in its docstring)\n"
        + header
        + yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=200)
    )
    Path(out).write_text(text)
    doc["_meta"] = meta


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--start", default="2017-10-09 00:00:00")
    ap.add_argument("--hours", type=float, default=None)
    ap.add_argument("--days", type=float, default=None, help="window length (wins over --hours)")
    ap.add_argument("--offset-days", type=float, default=0.0, help="added to --start")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--max-gpus", type=int, default=16)
    ap.add_argument("--estimate-factor", type=float, default=0.0)
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    start, hours = window(a.start, days=a.days, hours=a.hours, offset_days=a.offset_days)
    doc = build_scenario(read_jobs(a.trace), start=start, hours=hours, load=a.load,
                         max_gpus=a.max_gpus, estimate_factor=a.estimate_factor)
    write_scenario(doc, a.out)
    meta = doc["_meta"]
    print(f"{len(doc['jobs'])} jobs ({meta['jobs_left_out']} left out), "
          f"{meta['groups']} node groups -> {a.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

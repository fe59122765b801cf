"""Many evaluation windows from the two traces, split into a tuning and an evaluation set.

One hand-picked window says little: a policy (or a baseline's setting) can be
good on it by luck. The windows here are *generated* by a rule written in one
file (``eval/windows.yaml``) and never chosen by looking at results:

* **Philly** (:mod:`app.simulate.philly`): a window of ``days`` starts every
  ``every_days`` from ``first`` to ``last``; the loads in ``loads`` are given
  to the kept windows in turn, one step further after each round (so that
  they do not line up with the split below); a window
  whose job count is outside ``[min_jobs, max_jobs]`` is skipped (the count
  is read off the trace before any policy runs: too few jobs give no team a
  P99 over 30 jobs, too many cost more CPU than two shared cores have).
* **Alibaba 2023** timed replay (:mod:`app.simulate.alibaba_timed`): the same
  over trace days ``first_day``..``last_day``.
* **The split**: of each trace's windows in time order, every
  ``tuning_every``-th (the first, then every n-th) is a *tuning* window, the
  others are *evaluation* windows. Windows of one trace never overlap in
  time (``every_days >= days`` is checked), so the two sets share no window
  and no job: a baseline's setting is chosen on the tuning windows only
  (:mod:`app.simulate.baseline_tuning`) and reported on the evaluation windows.

``python -m app.simulate.windows eval/windows.yaml --out eval/windows`` writes
one scenario file per window into ``OUT/tuning/`` and ``OUT/evaluation/``
(each names its trace and builder options, like the suite's; any of them
replays alone with ``gpuq simulate FILE``), and prints the table of windows.
"""

from __future__ import annotations

import argparse
import csv
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

from app.simulate.philly import TIME_FORMAT

DAY = 86400.0
PHILLY_PATH = "philly/philly_sia_processed.csv"
ALIBABA_NODES = "alibaba-gpu-2023/openb_node_list_gpu_node.csv"
ALIBABA_PODS = "alibaba-gpu-2023/openb_pod_list_default.csv"


@dataclass(frozen=True, slots=True)
class Window:
    """One generated window: a trace, its builder options, its set and its job count."""

    name: str
    trace: str  # "philly" | "alibaba"
    options: dict[str, Any]
    role: str  # "tuning" | "evaluation"
    jobs: int
    start_s: float  # the window in trace time (seconds), for the overlap check
    end_s: float

    def scenario(self, traces: str) -> dict[str, Any]:
        """The scenario document (a trace reference) for this window; ``traces`` is the
        trace folder relative to where the file is written."""
        if self.trace == "philly":
            tr = {"format": "philly", "path": f"{traces}/{PHILLY_PATH}", "options": self.options}
        else:
            tr = {"format": "alibaba-openb", "nodes": f"{traces}/{ALIBABA_NODES}",
                  "pods": f"{traces}/{ALIBABA_PODS}", "options": self.options}
        return {"trace": tr}


@dataclass(frozen=True, slots=True)
class TraceRule:
    """The generation rule of one trace's windows (one section of ``eval/windows.yaml``)."""

    first: float  # Philly: a date as seconds since the epoch; Alibaba: a trace day
    last: float
    every_days: float
    days: float
    loads: tuple[float, ...]
    min_jobs: int = 0
    max_jobs: int = 10**9
    tuning_every: int = 3
    extra: dict[str, Any] = field(default_factory=dict)


def _rule(doc: dict[str, Any], tuning_every: int, dates: bool) -> TraceRule:
    def when(x: Any) -> float:
        if not dates:
            return float(x)
        return datetime.fromisoformat(str(x)).timestamp()

    r = TraceRule(
        first=when(doc["first"]), last=when(doc["last"]),
        every_days=float(doc["every_days"]), days=float(doc["days"]),
        loads=tuple(float(x) for x in doc["loads"]),
        min_jobs=int(doc.get("min_jobs", 0)), max_jobs=int(doc.get("max_jobs", 10**9)),
        tuning_every=int(doc.get("tuning_every", tuning_every)),
        extra=dict(doc.get("options", {})),
    )
    if r.every_days < r.days:
        raise ValueError(f"every_days ({r.every_days}) < days ({r.days}): windows would "
                         "overlap, and a tuning and an evaluation window could share jobs")
    if not r.loads or r.tuning_every < 2:
        raise ValueError("loads must not be empty and tuning_every must be >= 2")
    return r


def philly_counts(path: str | Path) -> list[float]:
    """Submit times (seconds since the epoch) of the Philly trace's jobs."""
    with Path(path).open(newline="") as f:
        return [datetime.strptime(r["timestamp"].strip(), TIME_FORMAT).timestamp()
                for r in csv.DictReader(f)]


def alibaba_days(path: str | Path) -> list[float]:
    """Creation times of the Alibaba pods, in days since the trace's first creation."""
    with Path(path).open(newline="") as f:
        ts = [float(r["creation_time"]) for r in csv.DictReader(f) if r.get("creation_time")]
    t0 = min(ts, default=0.0)
    return [(t - t0) / DAY for t in ts]


def _load_role(rule: TraceRule, i: int) -> tuple[float, str]:
    """The load and the set of the i-th kept window. The loads turn one step further after
    each round of them, so that they do not line up with the tuning/evaluation cycle (with
    three loads and every third window tuning, all tuning windows would get one load)."""
    n = len(rule.loads)
    load = rule.loads[(i + i // n) % n]
    return load, "tuning" if i % rule.tuning_every == 0 else "evaluation"


def _starts(rule: TraceRule, step: float) -> Iterator[float]:
    x = rule.first
    while x <= rule.last + 1e-9:
        yield x
        x += rule.every_days * step


def generate(spec: dict[str, Any], traces: str | Path) -> list[Window]:
    """Every window of ``spec`` (the parsed ``eval/windows.yaml``), tuning and evaluation."""
    traces = Path(traces)
    tuning_every = int(spec.get("tuning_every", 3))
    out: list[Window] = []
    if "philly" in spec:
        rule = _rule(spec["philly"], tuning_every, dates=True)
        submits = philly_counts(traces / PHILLY_PATH)
        kept = 0
        for start in _starts(rule, DAY):
            end = start + rule.days * DAY
            n = sum(1 for s in submits if start <= s < end)
            if not rule.min_jobs <= n <= rule.max_jobs:
                continue
            load, role = _load_role(rule, kept)
            day = datetime.fromtimestamp(start)
            opts = {"start": day.strftime(TIME_FORMAT), "days": rule.days, "load": load,
                    **rule.extra}
            name = f"philly-{day.strftime('%m%d')}-{rule.days:g}d-{load:.1f}"
            out.append(Window(name, "philly", opts, role, n, start, end))
            kept += 1
    if "alibaba" in spec:
        rule = _rule(spec["alibaba"], tuning_every, dates=False)
        days = alibaba_days(traces / ALIBABA_PODS)
        kept = 0
        for start in _starts(rule, 1.0):
            end = start + rule.days
            n = sum(1 for d in days if start <= d < end)
            if not rule.min_jobs <= n <= rule.max_jobs:
                continue
            load, role = _load_role(rule, kept)
            opts = {"start_day": start, "days": rule.days, "load": load, **rule.extra}
            name = f"alibaba-d{start:g}-{rule.days:g}d-{load:.1f}"
            out.append(Window(name, "alibaba", opts, role, n, start * DAY, end * DAY))
            kept += 1
    check_disjoint(out)
    return out


def check_disjoint(windows: list[Window]) -> None:
    """No two windows of one trace overlap in time and no name repeats (so the tuning and
    the evaluation sets share no window and no job)."""
    names = [w.name for w in windows]
    if len(set(names)) != len(names):
        raise ValueError("two windows have the same name")
    for trace in {w.trace for w in windows}:
        ws = sorted((w for w in windows if w.trace == trace), key=lambda w: w.start_s)
        for a, b in zip(ws, ws[1:], strict=False):
            if b.start_s < a.end_s - 1e-6:
                raise ValueError(f"windows {a.name} and {b.name} overlap")


def table(windows: list[Window]) -> str:
    lines = ["| window | set | trace options | jobs in the window |", "|---|---|---|---|"]
    for w in windows:
        opts = ", ".join(f"{k}: {v}" for k, v in w.options.items())
        lines.append(f"| {w.name} | {w.role} | {opts} | {w.jobs:,} |")
    return "\n".join(lines)


def write(windows: list[Window], out: str | Path, traces_rel: str) -> list[Path]:
    """One scenario file per window under ``out/<role>/``; stale files there are removed."""
    out = Path(out)
    paths = []
    for role in ("tuning", "evaluation"):
        d = out / role
        d.mkdir(parents=True, exist_ok=True)
        for old in d.glob("*.yaml"):
            old.unlink()
    for w in windows:
        p = out / w.role / f"{w.name}.yaml"
        head = (f"# {w.role} window generated by app.simulate.windows from eval/windows.yaml "
                f"({w.jobs} jobs in the window); do not edit, regenerate\n")
        p.write_text(head + yaml.safe_dump(w.scenario(traces_rel), sort_keys=False))
        paths.append(p)
    return paths


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("spec", help="the generation rule (eval/windows.yaml)")
    ap.add_argument("--traces", default="eval/traces", help="the trace folder (make traces)")
    ap.add_argument("--out", default=None, help="write one scenario file per window here")
    a = ap.parse_args(argv)
    spec = yaml.safe_load(Path(a.spec).read_text())
    windows = generate(spec, a.traces)
    print(table(windows))
    n_t = sum(w.role == "tuning" for w in windows)
    print(f"\n{n_t} tuning and {len(windows) - n_t} evaluation windows")
    if a.out:
        import os

        rel = os.path.relpath(Path(a.traces).resolve(), (Path(a.out) / "tuning").resolve())
        write(windows, a.out, rel)
        print(f"scenario files written under {a.out}/tuning and {a.out}/evaluation")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

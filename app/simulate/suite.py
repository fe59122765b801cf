"""Run every policy on a suite of scenarios and write one comparison report.

``python -m app.simulate.suite --tune eval/windows/tuning/*.yaml --evaluate
eval/windows/evaluation/*.yaml --out docs/eval/windows`` is the evaluation: each
baseline's settings are chosen on the tuning windows (:mod:`app.simulate.baseline_tuning`),
then every policy runs on the evaluation windows (the two sets may share no
window: checked), and the report adds the tuning (every setting's score, the
chosen one), the goal counted over the windows and means with 95 % confidence
intervals over the windows. ``--chosen DIR/suite.json`` reuses the settings an
earlier run chose (e.g. to split the evaluation windows over two processes and
``--combine`` them).

``python -m app.simulate.suite eval/suite/*.yaml --out docs/eval/suite
[--policies gpuq,kueue,volcano,slurm,fifo-typed]`` runs scenarios with the
baselines' default settings and writes, into ``--out``:

* ``suite.json``: per scenario and policy the result's ``summary`` (every
  measure of :mod:`app.simulate.measures`, per team too) and the CPU seconds
  the run took, plus the load average of the machine when it started;
* ``report.md``: the goals of docs/evaluation.md checked for ``gpuq`` against the best
  baseline of the same run, a headline table of the goals' measures (the one in
  the README), and one table per scenario (every policy, every measure) with the
  per-team waits;
* ``suite_jct.png``, ``suite_wait_p99.png``: mean JCT and the worst team's P99
  wait per scenario and policy.

Scenarios may run in separate processes (one ``--out`` each) and be put in one report
with ``--combine A/suite.json B/suite.json --out DIR``.

The full suite is a by-hand command (minutes per scenario on 2 cores); tests
run it on tiny scenarios.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from typing import Any

import yaml

from app.simulate.baseline_tuning import Settings, build, tune
from app.simulate.baseline_tuning import label as setting_label
from app.simulate.bound import DEFAULT_SLOTS, lower_bound
from app.simulate.command import load_scenario
from app.simulate.replay import ScenarioModel, Simulator, to_json

DEFAULT_POLICIES = ("gpuq", "kueue", "volcano", "slurm", "fifo-typed")
# what teams would use instead (the goals' rivals); fifo-typed counts: it is what a queue
# with no policy at all does, and it beats the others on some windows
BASELINES = ("kueue", "volcano", "slurm", "fifo-typed")

# the goal (docs/evaluation.md): gpuq against *every* baseline of the same run
GOAL_TOLERANCE = 0.02  # at least as good on mean JCT and worst team's P99 wait, within 2 %
GOAL_CLOSED = 0.30  # closes at least 30 % of the best baseline's gap to the bound (mean JCT)
GOAL_WASTE_PCT = 5.0  # thrown-away GPU-hours under 5 % of GPU-hours used


def run_one(model: ScenarioModel, policy: str,
            settings: Settings | None = None) -> dict[str, Any]:
    t0 = time.process_time()
    doc = to_json(Simulator(model, build(policy, settings), policy).run())
    out = {"summary": doc["summary"], "cpu_s": round(time.process_time() - t0, 2)}
    if settings:
        out["settings"] = settings
    return out


def bound_of(model: ScenarioModel, slots: int | None = None) -> dict[str, Any]:
    """The scenario's LP lower bound of mean JCT (app/simulate/bound.py)."""
    t0 = time.process_time()
    b = lower_bound(model, slots=slots or DEFAULT_SLOTS)
    return {"jct_mean_s": round(b.jct_mean_s, 6), "slots": b.slots,
            "horizon_s": round(b.horizon_s, 3), "whole_jobs": b.whole_jobs,
            "cpu_s": round(time.process_time() - t0, 2)}


def run_suite(paths: list[str], policies: list[str], progress: bool = False,
              bound: bool = True, settings: dict[str, Settings] | None = None,
              slots: int | None = None) -> dict[str, Any]:
    """Every policy (a baseline with ``settings[policy]`` when given) on every scenario."""
    settings = settings or {}
    out: dict[str, Any] = {"load_average": os.getloadavg()[0], "policies": policies,
                           "scenarios": {}}
    for path in paths:
        name = Path(path).stem
        model = load_scenario(path)  # read once: a run never changes the model
        runs = {}
        for p in policies:
            runs[p] = run_one(model, p, settings.get(p))
            if progress:
                s = runs[p]["summary"]
                print(f"{name} {p}: jct mean {s['jct_mean_s']}, worst team p99 "
                      f"{s['worst_team_wait_p99_s']}, {runs[p]['cpu_s']} CPU s", flush=True)
        out["scenarios"][name] = {"path": str(path), "runs": runs}
        if bound:
            out["scenarios"][name]["bound"] = bound_of(model, slots)
            if progress:
                print(f"{name} bound: {out['scenarios'][name]['bound']}", flush=True)
    return out


def trace_span(path: str | Path) -> tuple[str, float, float] | None:
    """(trace, start, end) of a trace window scenario in trace time (seconds), or None for
    a scenario that lists its own jobs."""
    from datetime import datetime

    doc = yaml.safe_load(Path(path).read_text()) or {}
    tr = doc.get("trace")
    if not tr:
        return None
    o = tr.get("options") or {}
    if tr.get("format") == "philly":
        t = datetime.fromisoformat(str(o.get("start", "2017-10-09 00:00:00"))).timestamp()
        t += float(o.get("offset_days", 0.0)) * 86400.0
        length = float(o["days"]) * 86400.0 if "days" in o else float(o.get("hours", 24)) * 3600
        return ("philly:" + Path(str(tr.get("path"))).name, t, t + length)
    if "load" in o:
        t = float(o.get("start_day", 118.0)) * 86400.0
        return ("alibaba:" + Path(str(tr.get("pods"))).name, t,
                t + float(o.get("days", 2.0)) * 86400.0)
    return ("alibaba:" + Path(str(tr.get("pods"))).name, 0.0, float("inf"))


def check_disjoint(tuning: list[str], evaluation: list[str]) -> None:
    """The tuning and the evaluation sets share no window: no file, and no two trace
    windows of the same trace that overlap in time (they would share jobs)."""
    same = {Path(p).resolve() for p in tuning} & {Path(p).resolve() for p in evaluation}
    if same:
        raise ValueError(f"in both the tuning and the evaluation set: {sorted(map(str, same))}")
    spans = {p: trace_span(p) for p in [*tuning, *evaluation]}
    for a in tuning:
        for b in evaluation:
            sa, sb = spans[a], spans[b]
            if sa and sb and sa[0] == sb[0] and sa[1] < sb[2] and sb[1] < sa[2]:
                raise ValueError(f"tuning window {a} and evaluation window {b} overlap")


def run_tuned(tuning: list[str], evaluation: list[str], policies: list[str],
              progress: bool = False, bound: bool = True,
              chosen: dict[str, Any] | None = None, slots: int | None = None) -> dict[str, Any]:
    """Tune each baseline on ``tuning`` (or take ``chosen``: an earlier run's ``tuning``),
    then run every policy with its chosen settings on ``evaluation``."""
    check_disjoint(tuning, evaluation)
    if chosen is None:
        models = {Path(p).stem: load_scenario(p) for p in tuning}
        chosen = tune(models, [p for p in policies if p in BASELINES], run_one, progress)
    doc = run_suite(evaluation, policies, progress=progress, bound=bound,
                    settings={p: t["chosen"] for p, t in chosen.items()}, slots=slots)
    doc["tuning"] = chosen
    return doc


def _ci(xs: list[float]) -> tuple[float, float] | None:
    """Mean and half-width of its 95 % confidence interval (Student's t); None when empty."""
    import math

    if not xs:
        return None
    m = sum(xs) / len(xs)
    if len(xs) < 2:
        return m, float("nan")
    from scipy.stats import t as student

    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (len(xs) - 1))
    return m, float(student.ppf(0.975, len(xs) - 1)) * sd / math.sqrt(len(xs))


def over_windows(doc: dict[str, Any]) -> dict[str, Any]:
    """The goal counted over the scenarios (windows) and means with 95 % CIs over them."""
    from app.simulate.bound import gap

    per: dict[str, dict[str, list[float]]] = {}
    met = {"all": 0, "jct": 0, "worst_team_p99": 0, "closed": 0, "max_team_slowdown": 0}
    ratios: dict[str, list[float]] = {"jct": [], "worst_team_p99": [], "max_team_slowdown": [],
                                      "closed": []}
    n = 0
    for sc in doc["scenarios"].values():
        b = sc.get("bound")
        for p, r in sc["runs"].items():
            s = r["summary"]
            d = per.setdefault(p, {})
            for k in ("jct_mean_s", "worst_team_wait_p99_s", "max_team_slowdown",
                      "jain_slowdown", "thrown_away_pct", "jobs_not_finished"):
                if s.get(k) is not None:
                    d.setdefault(k, []).append(float(s[k]))
            g = gap(s.get("jct_mean_s"), b["jct_mean_s"]) if b else None
            if g is not None:
                d.setdefault("gap", []).append(g)
        met_goals = goals(sc["runs"], b)
        if met_goals is None:
            continue
        n += 1
        for k in met:
            met[k] += bool(met_goals[k] if k == "all" else met_goals[k]["met"])
        for k in ("jct", "worst_team_p99", "max_team_slowdown"):
            if met_goals[k]["best_value"] and met_goals[k]["gpuq"] is not None:
                ratios[k].append(met_goals[k]["gpuq"] / met_goals[k]["best_value"])
        if met_goals["closed"]["share"] is not None:
            ratios["closed"].append(met_goals["closed"]["share"])
    return {"windows": n, "met": met,
            "ratios": {k: _ci(v) for k, v in ratios.items()},
            "policies": {p: {k: _ci(v) for k, v in d.items()} for p, d in per.items()}}


def goals(runs: dict[str, Any], bound: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """gpuq against every baseline of the same run, per goal; None without both."""
    from app.simulate.bound import closes_share, share_closed

    rivals = [p for p in BASELINES if p in runs]
    if "gpuq" not in runs or not rivals:
        return None
    g = runs["gpuq"]["summary"]
    sums = {p: runs[p]["summary"] for p in rivals}

    def best(key: str, lower: bool = True) -> tuple[str | None, float | None]:
        vals = [(p, s[key]) for p, s in sums.items() if s.get(key) is not None]
        if not vals:  # e.g. no team with enough jobs for a P99
            return None, None
        return (min if lower else max)(vals, key=lambda x: x[1])

    def within(mine: float | None, theirs: float | None) -> bool:
        if theirs is None:
            return True
        return (mine or 0.0) <= theirs * (1 + GOAL_TOLERANCE) + 1e-9

    bj, jct = best("jct_mean_s")
    bp, p99 = best("worst_team_wait_p99_s")
    bs, slow = best("max_team_slowdown")
    bf, jain = best("jain_slowdown", lower=False)
    gj, gp = g["jct_mean_s"] or 0.0, g["worst_team_wait_p99_s"]
    closed = share_closed(gj, jct, bound["jct_mean_s"]) if bound else None
    closed_met = bound is not None and jct is not None and closes_share(
        gj, jct, bound["jct_mean_s"], GOAL_CLOSED)
    return {
        "jct": {"best": bj, "best_value": jct, "gpuq": gj, "met": within(gj, jct)},
        "worst_team_p99": {"best": bp, "best_value": p99, "gpuq": gp, "met": within(gp, p99)},
        "closed": {"best": bj, "share": None if closed is None else round(closed, 4),
                   "met": closed_met},
        "max_team_slowdown": {"best": bs, "best_value": slow, "gpuq": g.get("max_team_slowdown"),
                              "met": within(g.get("max_team_slowdown"), slow)},
        "jain": {"best": bf, "best_value": jain, "gpuq": g["jain_slowdown"]},
        "not_finished": {"gpuq": g.get("jobs_not_finished", 0)},
        "thrown_away_pct": {"gpuq": g["thrown_away_pct"],
                            "met": g["thrown_away_pct"] < GOAL_WASTE_PCT},
        "all": within(gj, jct) and within(gp, p99) and within(g.get("max_team_slowdown"), slow)
        and closed_met,
    }


def _f(x: Any, nd: int = 0) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:,.{nd}f}"
    return str(x)


def _whole(lb: dict[str, Any]) -> str:
    """How many jobs the bound kept whole; a bound stored before it could has none."""
    if "whole_jobs" not in lb:
        return "every job fluid"
    return f"{lb['whole_jobs']} jobs whole"


def _gap(s: dict[str, Any], bound: dict[str, Any] | None) -> str:
    from app.simulate.bound import gap

    g = gap(s.get("jct_mean_s"), bound["jct_mean_s"]) if bound else None
    return "-" if g is None else f"{100 * g:.1f} %"


def scenario_table(runs: dict[str, Any], bound: dict[str, Any] | None = None) -> str:
    types = sorted({t for r in runs.values() for t in r["summary"]["utilization"]})
    head = ["policy", "finished", "failed", "not started", "wait P50 s", "wait P99 s",
            "worst team wait P99 s", "JCT mean s", "gap to bound", "JCT P50 s", "JCT P99 s",
            "mean slowdown",
            "Jain (slowdown)", "max team slowdown", "not finished", "max wait s",
            f"utilization {' / '.join(types)}", "makespan s", "restarts",
            "GPU-h thrown away (% of used)", "CPU s"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for p, r in runs.items():
        s = r["summary"]
        util = " / ".join(f"{s['utilization'].get(t, 0.0):.2f}" for t in types)
        lines.append("| " + " | ".join([
            p, _f(s["finished"]), _f(s["failed"]), _f(s["not_started"]), _f(s["wait_p50_s"]),
            _f(s["wait_p99_s"]), _f(s["worst_team_wait_p99_s"]), _f(s["jct_mean_s"]),
            _gap(s, bound),
            _f(s["jct_p50_s"]), _f(s["jct_p99_s"]), _f(s["slowdown_mean"], 2),
            _f(s["jain_slowdown"], 3), _f(s.get("max_team_slowdown"), 2),
            _f(s.get("jobs_not_finished")), _f(s.get("max_wait_s")),
            util, _f(s["makespan_s"]), _f(s["restarts"]),
            f"{_f(s['gpu_hours_thrown_away'], 1)} ({_f(s['thrown_away_pct'], 2)} %)",
            _f(r["cpu_s"], 1),
        ]) + " |")
    return "\n".join(lines)


def team_table(runs: dict[str, Any]) -> str:
    teams = sorted({t for r in runs.values() for t in r["summary"]["by_team"]})
    pols = list(runs)
    lines = ["| team (jobs) | " + " | ".join(pols) + " |", "|---|" + "---|" * len(pols)]
    for t in teams:
        jobs = next((r["summary"]["by_team"][t]["jobs"] for r in runs.values()
                     if t in r["summary"]["by_team"]), 0)
        cells = []
        for p in pols:
            bt = runs[p]["summary"]["by_team"].get(t)
            cells.append("-" if bt is None else
                         f"{_f(bt['wait_p50_s'])} / {_f(bt['wait_p99_s'])}")
        lines.append(f"| {t} ({jobs}) | " + " | ".join(cells) + " |")
    return "\n".join(lines)


HEADLINE = (  # (summary key, scale, decimals): the goals' measures, in the README
    ("jct_mean_s", 1 / 3600, 2),
    ("worst_team_wait_p99_s", 1 / 3600, 1),
    ("jain_slowdown", 1.0, 3),
    ("thrown_away_pct", 1.0, 1),
)
HEADLINE_LABEL = "mean JCT h / worst team's P99 wait h / Jain / GPU-h thrown away %"


def headline_table(doc: dict[str, Any]) -> str:
    """The goals' measures, a row per scenario and a cell per policy (short: the README's)."""
    pols = doc["policies"]
    lines = [f"| scenario ({HEADLINE_LABEL}) | " + " | ".join(pols) + " |",
             "|---|" + "---|" * len(pols)]
    for name, sc in doc["scenarios"].items():
        cells = []
        for p in pols:
            s = sc["runs"][p]["summary"] if p in sc["runs"] else {}
            cells.append(" / ".join(
                _f(None if s.get(k) is None else float(s[k]) * scale, nd)
                for k, scale, nd in HEADLINE))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def goals_table(doc: dict[str, Any]) -> str:
    lines = ["| scenario | mean JCT: gpuq vs best baseline (within 2 %) | share of the best's gap "
             "to the bound closed (>= 30 %) | worst team's P99 wait: gpuq vs best (within 2 %) | "
             "max team slowdown: gpuq vs best | all |", "|---|---|---|---|---|---|"]
    met = total = 0
    for name, sc in doc["scenarios"].items():
        g = goals(sc["runs"], sc.get("bound"))
        if g is None:
            continue
        total += 1
        met += g["all"]

        def ok(x: dict) -> str:
            return "met" if x["met"] else "**not met**"

        j, w, c, m = g["jct"], g["worst_team_p99"], g["closed"], g["max_team_slowdown"]
        # one decimal: 29.5 % shown as "30 %" beside "not met" read as a contradiction
        share = "- (no gap)" if c["share"] is None else f"{100 * c['share']:.1f} %"
        lines.append(
            f"| {name} | {_f(j['gpuq'])} vs {_f(j['best_value'])} ({j['best']}) {ok(j)} | "
            f"{share} {ok(c)} | {_f(w['gpuq'])} vs {_f(w['best_value'])} ({w['best']}) {ok(w)} | "
            f"{_f(m['gpuq'], 2)} vs {_f(m['best_value'], 2)} ({m['best']}) {ok(m)} | "
            f"{'met' if g['all'] else '**not met**'} |")
    lines.append(f"\nAll goals met on {met} of {total} scenarios.")
    return "\n".join(lines)


def write_plots(doc: dict[str, Any], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = list(doc["scenarios"])
    pols = doc["policies"]
    files = []
    for key, label, fname in (("jct_mean_s", "mean JCT (hours)", "suite_jct.png"),
                              ("worst_team_wait_p99_s", "worst team's P99 wait (hours)",
                               "suite_wait_p99.png")):
        fig, ax = plt.subplots(figsize=(8, 4.5))
        width = 0.8 / max(1, len(pols))
        for i, p in enumerate(pols):  # hours, as every simulation plot (app/simulate/report.py)
            ys = [(doc["scenarios"][n]["runs"][p]["summary"][key] or 0.0) / 3600.0
                  for n in names]
            ax.bar([k + i * width for k in range(len(names))], ys, width, label=p)
        ax.set_xticks([k + 0.4 - width / 2 for k in range(len(names))], names, fontsize=8)
        ax.set_ylabel(label)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / fname, dpi=100)
        plt.close(fig)
        files.append(fname)
    return files


def tuning_tables(tuning: dict[str, Any]) -> str:
    """Per baseline: every setting of its grid, its score on the tuning windows (lower is
    better) and its mean JCT / worst team's P99 wait per tuning window; the chosen one bold."""
    out = []
    for p, t in tuning.items():
        wins = list(t["windows"])
        out += [f"**{p}** (chosen: `{t['chosen_label']}`; {t['cpu_s']:.0f} CPU s)", "",
                "| setting | score | " + " | ".join(wins) + " |",
                "|---|---|" + "---|" * len(wins)]
        for settings in t["grid"]:
            lab = setting_label(settings)
            cells = []
            for w in wins:
                s = t["windows"][w][lab]
                cells.append(f"{_f(_h(s['jct_mean_s']), 2)} / "
                             f"{_f(_h(s['worst_team_wait_p99_s']), 1)}")
            name = f"**{lab}**" if lab == t["chosen_label"] else lab
            out.append(f"| {name} | {t['scores'][lab]:.3f} | " + " | ".join(cells) + " |")
        out.append("")
    return "\n".join(out)


def _h(x: Any) -> float | None:
    return None if x is None else float(x) / 3600.0


def _pm(x: tuple[float, float] | None, scale: float = 1.0, nd: int = 2, pct: bool = False) -> str:
    if x is None:
        return "-"
    m, h = x[0] * scale, x[1] * scale
    unit = " %" if pct else ""
    if h != h:  # one window: no interval
        return f"{m:,.{nd}f}{unit}"
    return f"{m:,.{nd}f} ± {h:,.{nd}f}{unit}"


def windows_tables(doc: dict[str, Any]) -> str:
    """The goal counted over the windows, and per policy the means over the windows with
    their 95 % confidence intervals."""
    ow = over_windows(doc)
    m, n = ow["met"], ow["windows"]
    r = ow["ratios"]
    lines = [
        f"All goals met on **{m['all']} of {n}** windows (the goal: at least 80 % of at least "
        f"10). Each goal alone: mean JCT within 2 % of every baseline on {m['jct']}, worst "
        f"team's P99 wait on {m['worst_team_p99']}, at least 30 % of the best baseline's gap "
        f"to the bound closed on {m['closed']}, max team slowdown on "
        f"{m['max_team_slowdown']}.", "",
        "gpuq over the best baseline of each window (mean over the windows ± 95 % CI): mean "
        f"JCT {_pm(r['jct'], 100, 1, True)}, worst team's P99 wait "
        f"{_pm(r['worst_team_p99'], 100, 1, True)}, max team slowdown "
        f"{_pm(r['max_team_slowdown'], 100, 1, True)}; share of the best baseline's gap "
        f"closed {_pm(r['closed'], 100, 1, True)}.", "",
        "| policy | mean JCT h | gap to bound | worst team's P99 wait h | max team slowdown "
        "| Jain | GPU-h thrown away % | jobs not finished |", "|---|---|---|---|---|---|---|---|"]
    for p in doc["policies"]:
        d = ow["policies"].get(p, {})
        lines.append(
            f"| {p} | {_pm(d.get('jct_mean_s'), 1 / 3600)} | {_pm(d.get('gap'), 100, 1, True)} "
            f"| {_pm(d.get('worst_team_wait_p99_s'), 1 / 3600, 1)} "
            f"| {_pm(d.get('max_team_slowdown'), 1.0, 2)} | {_pm(d.get('jain_slowdown'), 1, 3)} "
            f"| {_pm(d.get('thrown_away_pct'), 1, 2)} | {_pm(d.get('jobs_not_finished'), 1, 1)} |")
    return "\n".join(lines)


def readme_table(doc: dict[str, Any]) -> str:
    """The README's compact table: a row per evaluation window (with its lower bound of
    mean JCT), a cell per policy with mean JCT h / worst team's P99 wait h (the rest of
    the measures per window: the report; their means: :func:`readme_means`)."""
    pols = doc["policies"]
    lines = ["| window: bound (mean JCT h / worst team's P99 h) | "
             + " | ".join(pols) + " |", "|---|" + "---|" * len(pols)]
    for name, sc in doc["scenarios"].items():
        b = sc.get("bound")
        cells = []
        for p in pols:
            s = sc["runs"][p]["summary"] if p in sc["runs"] else {}
            cells.append(f"{_f(_h(s.get('jct_mean_s')), 2)} / "
                         f"{_f(_h(s.get('worst_team_wait_p99_s')), 1)}")
        lb = "-" if not b else _f(_h(b["jct_mean_s"]), 2)
        short = name.replace("-2d-1.0", "").replace("-1d-", " @")
        lines.append(f"| {short}: {lb} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def readme_means(doc: dict[str, Any]) -> str:
    """The README's second table: per policy, every measure's mean over the windows."""
    ow = over_windows(doc)
    lines = ["| mean of windows | JCT h | gap to bound | worst team's P99 h | max team "
             "slowdown | Jain | thrown away % | unfinished |",
             "|---|---|---|---|---|---|---|---|"]
    cols = (("jct_mean_s", 1 / 3600, 2, ""), ("gap", 100, 0, " %"),
            ("worst_team_wait_p99_s", 1 / 3600, 1, ""), ("max_team_slowdown", 1, 1, ""),
            ("jain_slowdown", 1, 2, ""), ("thrown_away_pct", 1, 1, ""),
            ("jobs_not_finished", 1, 1, ""))
    for p in doc["policies"]:
        d = ow["policies"].get(p, {})
        cells = ["-" if d.get(k) is None else f"{d[k][0] * sc:,.{nd}f}{u}"
                 for k, sc, nd, u in cols]
        lines.append(f"| {p} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def chosen_line(doc: dict[str, Any]) -> str:
    """Each tuned baseline's chosen setting, one line (README)."""
    return "; ".join(f"{p}: `{t['chosen_label']}`" for p, t in doc.get("tuning", {}).items())


def write_report(doc: dict[str, Any], out_dir: str | Path, plots: bool = True) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "suite.json").write_text(json.dumps(doc, indent=1))
    md = ["# Policy comparison on the evaluation suite", "",
          f"Policies: {', '.join(doc['policies'])}. Load average when the run started: "
          f"{doc['load_average']:.1f} (CPU seconds per run are in the last column).", "",
          "## Goals (gpuq against the best baseline of the same run)", "", goals_table(doc), "",
          *(["## Over the windows", "", windows_tables(doc), ""]
            if len(doc["scenarios"]) > 1 else []),
          *(["## Tuning: each baseline's grid on the tuning windows (mean JCT h / worst "
             "team's P99 wait h)", "", tuning_tables(doc["tuning"]), ""]
            if doc.get("tuning") else []),
          "## Headline (the goals' measures; every measure per scenario below)", "",
          headline_table(doc), ""]
    for name, sc in doc["scenarios"].items():
        lb = sc.get("bound")
        md += [f"## {name} (`{sc['path']}`)", "",
               "" if lb is None else f"Lower bound of mean JCT (LP, {lb['slots']} slots, "
               f"{_whole(lb)}): {_f(lb['jct_mean_s'])} s.", "", scenario_table(sc["runs"], lb), "",
               "Per team, wait P50 / P99 (s):", "", team_table(sc["runs"]), ""]
    if plots:
        for f in write_plots(doc, out):
            md.append(f"![{f}]({f})")
    path = out / "report.md"
    path.write_text("\n".join(md) + "\n")
    return path


def combine(docs: list[dict[str, Any]]) -> dict[str, Any]:
    """Several suite.json documents (e.g. scenarios run in parallel) as one. A later
    document's run of a policy on a scenario, and its tuning of a baseline, replace an
    earlier one's (so one baseline can be re-run and merged into a stored report)."""
    out: dict[str, Any] = {"load_average": max(d["load_average"] for d in docs),
                           "policies": [], "scenarios": {}}
    for d in docs:
        if d.get("tuning"):
            out.setdefault("tuning", {}).update(d["tuning"])
        for p in d["policies"]:
            if p not in out["policies"]:
                out["policies"].append(p)
        for name, sc in d["scenarios"].items():
            have = out["scenarios"].setdefault(name, {"path": sc["path"], "runs": {}})
            have["runs"].update(sc["runs"])
            if "bound" in sc:
                have["bound"] = sc["bound"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("scenarios", nargs="*")
    ap.add_argument("--policies", default=",".join(DEFAULT_POLICIES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-plots", action="store_true")
    ap.add_argument("--no-bound", action="store_true", help="skip the LP lower bound")
    ap.add_argument("--bound-slots", type=int, default=DEFAULT_SLOTS,
                    help="time slots of the LP bound (fewer: looser, much faster)")
    ap.add_argument("--combine", nargs="+", default=None, metavar="SUITE_JSON",
                    help="write one report from suite.json files of earlier runs instead")
    ap.add_argument("--tune", nargs="+", default=None, metavar="SCENARIO",
                    help="tuning windows: each baseline's setting is chosen on these (alone: "
                    "only the tuning, reused by --chosen)")
    ap.add_argument("--evaluate", nargs="+", default=None, metavar="SCENARIO",
                    help="evaluation windows: every policy runs on these with its chosen setting")
    ap.add_argument("--chosen", default=None, metavar="SUITE_JSON",
                    help="take the settings an earlier run chose (its tuning) instead of tuning")
    a = ap.parse_args(argv)
    pols = [p.strip() for p in a.policies.split(",") if p.strip()]
    if a.scenarios and (a.combine or a.tune or a.evaluate):
        # they used to be dropped without a word
        ap.error("scenario files are a suite run of their own: with --tune/--evaluate give "
                 "them to --evaluate, with --combine run them apart")
    if a.tune and not a.evaluate and not a.combine and not any(p in BASELINES for p in pols):
        # it used to write a suite.json with no tuning and no runs
        ap.error(f"--tune alone chooses the baselines' settings, and --policies names none "
                 f"({', '.join(pols)}): to run {', '.join(pols)} on windows, give them as "
                 "scenario files")
    if a.combine:
        doc = combine([json.loads(Path(f).read_text()) for f in a.combine])
    elif a.evaluate:
        if not a.tune:
            ap.error("--evaluate needs --tune (the windows the settings are chosen on)")
        chosen = None
        if a.chosen:  # scores and choices recomputed from the stored results by the rule
            from app.simulate.baseline_tuning import choose

            chosen = {p: choose(t) for p, t in json.loads(
                Path(a.chosen).read_text())["tuning"].items()}
        doc = run_tuned(a.tune, a.evaluate, pols, progress=True, bound=not a.no_bound,
                        chosen=chosen, slots=a.bound_slots)
    elif a.tune:  # tuning only: the chosen settings, for --chosen of later runs
        models = {Path(p).stem: load_scenario(p) for p in a.tune}
        doc = {"load_average": os.getloadavg()[0], "policies": pols, "scenarios": {},
               "tuning": tune(models, [p for p in pols if p in BASELINES], run_one, True)}
    elif a.scenarios:
        doc = run_suite(a.scenarios, pols, progress=True, bound=not a.no_bound,
                        slots=a.bound_slots)
    else:
        ap.error("give scenario files, --tune ... --evaluate ..., or --combine SUITE_JSON ...")
    path = write_report(doc, a.out, plots=not a.no_plots)
    print(f"report written to {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""``--report DIR``: a Markdown summary and PNG plots of simulation results.

Several results (one per policy) can be put side by side:
``python -m app.simulate.report DIR result-a.json result-b.json ...``
(fill results and replay results are told apart by ``"protocol": "fill"``).

Plots (matplotlib, Agg backend, no display needed):
* fill runs: unallocated % against arrived % per policy (``fill_unallocated.png``);
* replays: wait CDF per team and policy (``wait_cdf.png``), allocated CU
  over time per GPU type and policy with each type's capacity as a dashed
  line (``allocation_<policy>.png``). Times are in hours; legends sit outside
  the axes (one entry per team colour and one per policy line style, in as
  many columns as they need), so eight teams or more stay readable.

The replay report starts with what was simulated: scenario, cluster, load,
window and policy (the result's ``scenario`` field, :mod:`app.simulate.scenario_info`).
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any, Literal

from app.simulate.scenario_info import header_lines

LEGEND_ROWS = 14  # legend entries per column before another column is added


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _fmt(x: Any) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.2f}"
    return str(x)


# --------------------------------------------------------------------------- fill


def fill_table(results: list[dict[str, Any]]) -> str:
    lines = [
        "| policy | GPUs | seeds | unallocated % at 100% arrived (median) | per seed |",
        "|---|---|---|---|---|",
    ]
    for r in results:
        per = ", ".join(_fmt(s["unallocated_pct_at_100"]) for s in r["per_seed"])
        seeds = r["seeds"]
        span = f"{seeds[0]}..{seeds[-1]}" if len(seeds) > 1 else str(seeds[0])
        lines.append(
            f"| {r['policy']} | {r['total_gpus']} | {span} | "
            f"{_fmt(r['unallocated_pct_at_100'])} | {per} |"
        )
    return "\n".join(lines)


def write_fill_report(results: list[dict[str, Any]], out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for r in results:
        xs = [p["arrived_pct"] for p in r["curve"]]
        ys = [100.0 - p["allocation_pct"] for p in r["curve"]]
        ax.plot(xs, ys, label=r["policy"])
    ax.set_xlabel("arrived workload (% of GPU capacity)")
    ax.set_ylabel("unallocated GPUs (%)")
    ax.set_xlim(left=70)
    ax.set_ylim(0, 35)
    ax.axvline(100, color="grey", lw=0.5)
    ax.grid(alpha=0.3)
    ax.legend()
    ax.set_title("Fill protocol: unallocated GPU share (median over seeds)")
    fig.tight_layout()
    fig.savefig(out / "fill_unallocated.png", dpi=110)
    plt.close(fig)
    md = [
        "# Fill protocol report",
        "",
        fill_table(results),
        "",
        "Allocation % at selected arrived % (median over seeds):",
        "",
        "| arrived % | " + " | ".join(r["policy"] for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    for a in (80, 90, 95, 100, 110, 120, 130):
        cells = []
        for r in results:
            v = next((p["allocation_pct"] for p in r["curve"] if p["arrived_pct"] == a), None)
            cells.append(_fmt(v))
        md.append(f"| {a} | " + " | ".join(cells) + " |")
    md += ["", "![unallocated vs arrived](fill_unallocated.png)", ""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path


# --------------------------------------------------------------------------- replay


def _cdf(values: list[float]) -> tuple[list[float], list[float]]:
    xs = sorted(values)
    n = len(xs)
    return xs, [(i + 1) / n for i in range(n)]


def allocation_series(doc: dict[str, Any]) -> dict[str, list[tuple[float, float]]]:
    """Allocated CU over time per GPU type, from the jobs' runs (start/end, allocations)."""
    deltas: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for j in doc.get("jobs", []):
        if j.get("start_s") is None:
            continue
        end = j.get("end_s") if j.get("end_s") is not None else j["start_s"]
        for a in j.get("allocations", []):
            t = a.get("gpu_type")
            if not t:
                continue
            u = float(a.get("units", 0.0))
            deltas[t].append((j["start_s"], u))
            deltas[t].append((end, -u))
    series = {}
    for t, ds in deltas.items():
        ds.sort()
        acc, pts = 0.0, []
        for x, d in ds:
            acc += d
            pts.append((x, acc))
        series[t] = pts
    return series


def replay_table(docs: list[dict[str, Any]]) -> str:
    lines = [
        "| policy | jobs | finished | failed | makespan s | wait P50 s | wait P99 s | "
        "P99/P50 | JCT P50 s | utilization |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for d in docs:
        s = d["summary"]
        p50, p99 = s["wait_p50_s"], s["wait_p99_s"]
        ratio = p99 / p50 if p50 else None
        util = ", ".join(f"{k} {v:.2f}" for k, v in sorted(s.get("utilization", {}).items()))
        lines.append(
            f"| {d.get('policy', '?')} | {s['jobs']} | {s['finished']} | {s.get('failed', 0)} | "
            f"{s['makespan_s']:.0f} | {p50:.0f} | {p99:.0f} | {_fmt(ratio)} | "
            f"{s['jct_p50_s']:.0f} | {util} |"
        )
    return "\n".join(lines)


def team_table(docs: list[dict[str, Any]]) -> str:
    lines = [
        "| team | policy | jobs | wait P50 s | wait P99 s | P99/P50 | JCT P50 s |",
        "|---|---|---|---|---|---|---|",
    ]
    teams = sorted({t for d in docs for t in d["summary"].get("by_team", {})})
    for t in teams:
        for d in docs:
            v = d["summary"].get("by_team", {}).get(t)
            if not v:
                continue
            p50, p99 = v["wait_p50_s"], v["wait_p99_s"]
            lines.append(
                f"| {t} | {d.get('policy', '?')} | {v['jobs']} | {p50:.0f} | {p99:.0f} | "
                f"{_fmt(p99 / p50 if p50 else None)} | {v['jct_p50_s']:.0f} |"
            )
    return "\n".join(lines)


def _legend_outside(fig: Any, ax: Any, handles: list[Any]) -> None:
    """A legend right of the axes, in as many columns as it needs (readable with any
    number of teams; it never covers the data)."""
    ncol = max(1, -(-len(handles) // LEGEND_ROWS))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.02, 1.0),
              borderaxespad=0.0, fontsize=7, ncol=ncol, frameon=False)
    fig.set_size_inches(7 + 1.9 * ncol, fig.get_size_inches()[1])


def wait_cdf_figure(docs: list[dict[str, Any]]) -> Any:
    """Wait CDF (hours, log) per team (colour) and policy (line style)."""
    plt = _plt()
    from matplotlib.lines import Line2D

    fig, ax = plt.subplots(figsize=(7, 4.5))
    teams = sorted({j["team"] for d in docs for j in d.get("jobs", [])})
    colors = plt.get_cmap("tab10" if len(teams) <= 10 else "tab20")
    ncolors = 10 if len(teams) <= 10 else 20
    styles: list[Literal["-", "--", ":", "-."]] = ["-", "--", ":", "-."]
    for k, d in enumerate(docs):
        by_team: dict[str, list[float]] = defaultdict(list)
        for j in d.get("jobs", []):
            if j.get("start_s") is not None:
                by_team[j["team"]].append(max(1.0, float(j["wait_s"])) / 3600.0)
        for team, waits in sorted(by_team.items()):
            xs, ys = _cdf(waits)
            ax.step(xs, ys, where="post", color=colors(teams.index(team) % ncolors),
                    linestyle=styles[k % len(styles)])
    ax.set_xscale("log")
    ax.set_xlabel("wait (hours, log scale; no wait shown as 1 s)")
    ax.set_ylabel("fraction of jobs")
    ax.grid(alpha=0.3)
    handles = [Line2D([], [], color=colors(i % ncolors), label=t) for i, t in enumerate(teams)]
    if len(docs) > 1:
        handles += [Line2D([], [], color="black", linestyle=styles[k % len(styles)],
                           label=f"policy {d.get('policy', '?')}") for k, d in enumerate(docs)]
    _legend_outside(fig, ax, handles)
    ax.set_title("Wait CDF per team" + (" (colour) and policy (line style)" if len(docs) > 1
                                        else f" ({docs[0].get('policy', '?')})"))
    fig.tight_layout()
    return fig


def allocation_figure(doc: dict[str, Any]) -> Any | None:
    """Allocated CU over time (hours) per GPU type, each type's capacity dashed."""
    series = allocation_series(doc)
    if not series:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 3.5))
    colors = plt.get_cmap("tab10")
    capacity = {t: v["capacity_cu"]
                for t, v in ((doc.get("scenario") or {}).get("cluster") or {}).items()}
    for i, t in enumerate(sorted(set(series) | set(capacity))):
        pts = series.get(t)
        if pts:
            ax.step([p[0] / 3600.0 for p in pts], [p[1] for p in pts], where="post",
                    color=colors(i % 10), label=f"{t} allocated")
        if t in capacity:
            ax.axhline(capacity[t], color=colors(i % 10), linestyle="--", linewidth=1,
                       label=f"{t} capacity ({capacity[t]:g} CU)")
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("CU")
    ax.set_ylim(bottom=0)
    ax.grid(alpha=0.3)
    _legend_outside(fig, ax, ax.get_legend_handles_labels()[0])
    ax.set_title(f"Allocation over time per GPU type ({doc.get('policy', '?')})")
    fig.tight_layout()
    return fig


def write_replay_report(docs: list[dict[str, Any]], out_dir: str | Path) -> Path:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    plt = _plt()
    fig = wait_cdf_figure(docs)
    fig.savefig(out / "wait_cdf.png", dpi=110)
    plt.close(fig)
    images = ["wait_cdf.png"]
    for d in docs:
        fig = allocation_figure(d)
        if fig is None:
            continue
        name = f"allocation_{d.get('policy', 'run')}.png"
        fig.savefig(out / name, dpi=110)
        plt.close(fig)
        images.append(name)
    md = ["# Simulation report", ""]
    infos = [d.get("scenario") for d in docs]
    policies = [str(d.get("policy", "?")) for d in docs]
    if all(i == infos[0] for i in infos):  # one scenario, several policies: one header
        md += header_lines(infos[0], policies)
    else:
        for info, pol in zip(infos, policies, strict=True):
            md += header_lines(info, [pol]) + [""]
    md += ["", replay_table(docs), "", "## Per team", "", team_table(docs)]
    md += [""] + [f"![{i}]({i})" for i in images] + [""]
    path = out / "report.md"
    path.write_text("\n".join(md))
    return path


def write_report(doc: dict[str, Any], out_dir: str | Path) -> Path:
    """The single-result entry point used by ``gpuq simulate --report``."""
    if doc.get("protocol") == "fill":
        return write_fill_report([doc], out_dir)
    return write_replay_report([doc], out_dir)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) < 2:
        print("usage: python -m app.simulate.report OUT_DIR RESULT.json [RESULT.json ...]")
        return 2
    docs = [json.loads(Path(p).read_text()) for p in args[1:]]
    fills = [d for d in docs if d.get("protocol") == "fill"]
    replays = [d for d in docs if d.get("protocol") != "fill"]
    if fills:
        print(write_fill_report(fills, args[0]))
    if replays:
        print(write_replay_report(replays, args[0]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

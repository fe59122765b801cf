"""The simulation report says what was simulated (cluster, load, window, policy) and its
plots are in hours, with capacity lines and a legend that stays readable with 8+ teams
(checked on matplotlib's figure objects, not on pixels)."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from app.simulate.command import run_simulate
from app.simulate.report import allocation_figure, wait_cdf_figure, write_replay_report

TEAMS = [f"team{i}" for i in range(9)]


def scenario(tmp_path: Path) -> Path:
    jobs = [{"name": f"j{i}", "team": TEAMS[i % 9], "resources": {"gpus": 1 + i % 4},
             "submit_at_s": 600.0 * i, "runtime_s": 3600.0 + 300 * (i % 5)}
            for i in range(36)]
    doc = {
        "gpu_types": [{"name": "a100-80g", "memory_gb": 80, "weight": 10},
                      {"name": "v100-16g", "memory_gb": 16, "weight": 4}],
        "nodes": [{"name": "a", "count": 2, "gpu_type": "a100-80g", "gpus": 8},
                  {"name": "v", "count": 1, "gpu_type": "v100-16g", "gpus": 4}],
        "pools": [{"name": "p"}],
        "teams": [{"name": t, "pool": "p"} for t in TEAMS],
        "jobs": jobs,
    }
    path = tmp_path / "nine-teams.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_header_states_cluster_load_window_and_policy(tmp_path):
    path = scenario(tmp_path)
    out = tmp_path / "r.json"
    assert run_simulate(str(path), policy="gpuq", out=str(out), report=str(tmp_path / "rep")) == 0
    info = json.loads(out.read_text())["scenario"]
    assert info["cluster"] == {"a100-80g": {"nodes": 2, "cards": 16, "capacity_cu": 160.0},
                               "v100-16g": {"nodes": 1, "cards": 4, "capacity_cu": 16.0}}
    assert info["jobs"] == 36 and info["teams"] == 9
    assert info["submit_window_s"] == [0.0, 21000.0]
    # GPU-time asked: sum of cards x run time over 20 GPUs x 21,000 s
    asked = sum((1 + i % 4) * (3600.0 + 300 * (i % 5)) for i in range(36))
    assert info["offered_load"] == round(asked / (20 * 21000.0), 2)
    md = (tmp_path / "rep" / "report.md").read_text().splitlines()
    head = "\n".join(md[:8])
    assert f"**Scenario:** `{path}`" in head
    assert "**Cluster:** 3 nodes, 20 GPUs, 176 CU in 1 pool(s)" in head
    assert "a100-80g 2 nodes x 8 = 16 cards, 160 CU" in head
    assert f"**Load:** offered {info['offered_load']:g}: 36 jobs of 9 teams" in head
    assert "**Window:** jobs submitted from 0.0 h to 5.8 h (5.8 h)" in head
    assert "**Policy:** gpuq" in head


def test_allocation_plot_in_hours_with_capacity_lines(tmp_path):
    path = scenario(tmp_path)
    out = tmp_path / "r.json"
    assert run_simulate(str(path), policy="gpuq", out=str(out)) == 0
    doc = json.loads(out.read_text())
    fig = allocation_figure(doc)
    ax = fig.axes[0]
    assert "hours" in ax.get_xlabel()
    xs = [x for line in ax.lines if "allocated" in line.get_label() for x in line.get_xdata()]
    last_end = max(j["end_s"] for j in doc["jobs"] if j["end_s"] is not None)
    assert max(xs) == last_end / 3600.0  # hours, not seconds
    caps = {line.get_label(): set(line.get_ydata()) for line in ax.lines
            if "capacity" in line.get_label()}
    assert caps == {"a100-80g capacity (160 CU)": {160.0}, "v100-16g capacity (16 CU)": {16.0}}
    assert max(y for line in ax.lines if "allocated" in line.get_label()
               for y in line.get_ydata()) <= 160.0


def test_wait_legend_readable_with_nine_teams_and_two_policies(tmp_path):
    path = scenario(tmp_path)
    docs = []
    for policy in ("gpuq", "fifo-typed"):
        out = tmp_path / f"{policy}.json"
        assert run_simulate(str(path), policy=policy, out=str(out)) == 0
        docs.append(json.loads(out.read_text()))
    fig = wait_cdf_figure(docs)
    ax = fig.axes[0]
    assert "hours" in ax.get_xlabel()
    legend = ax.get_legend()
    labels = [t.get_text() for t in legend.get_texts()]
    # one entry per team colour and one per policy style, not team x policy
    assert labels == TEAMS + ["policy gpuq", "policy fifo-typed"]
    colours = {tuple(h.get_color()) if not isinstance(h.get_color(), str) else h.get_color()
               for h in legend.legend_handles[:9]}
    assert len(colours) == 9  # nine teams, nine colours
    fig.canvas.draw()  # outside the axes: the legend's box starts right of the plot area
    assert legend.get_window_extent().x0 >= ax.get_window_extent().x1
    write_replay_report(docs, tmp_path / "both")
    md = (tmp_path / "both" / "report.md").read_text()
    assert "**Policy:** gpuq, fifo-typed" in md and md.count("**Cluster:**") == 1

"""Scenario builders of the evaluation suite and the one command that compares policies."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from app.simulate.alibaba import read_nodes, read_pods
from app.simulate.alibaba_timed import build_timed_scenario
from app.simulate.philly import build_scenario, read_jobs, window
from app.simulate.suite import combine, goals, headline_table, main, over_windows, run_suite
from tests.unit.openb_fixtures import write_nodes, write_pods
from tests.unit.test_philly_builder import _philly_csv


def test_philly_window_takes_days_and_an_offset(tmp_path):
    start, hours = window("2017-10-08 00:00:00", days=2, offset_days=1)
    assert start == datetime(2017, 10, 9) and hours == 48.0
    assert window("2017-10-09 00:00:00", hours=6) == (datetime(2017, 10, 9), 6.0)
    jobs = read_jobs(_philly_csv(tmp_path / "p.csv"))
    a = build_scenario(jobs, start=start, hours=hours, load=0.01)
    b = build_scenario(jobs, start=start, hours=hours, load=2.0)
    assert a["_meta"]["jobs_in_window"] == 61  # the day after is in a 2-day window
    assert len(a["jobs"]) == len(b["jobs"])
    assert a["_meta"]["groups"] > b["_meta"]["groups"]  # a lower load needs more nodes


def _openb(tmp_path):
    nodes = [(f"n-{i:02d}", 64000, 262144, 8, "T4" if i % 2 else "V100M16") for i in range(20)]
    day = 86400
    pods = [(f"p-{i:03d}", 4000, 8192, 1, 1000, "", "LS" if i % 3 else "BE", "Running",
             day * 10 + i * 600, day * 10 + i * 600 + 3600, day * 10 + i * 600 + 5)
            for i in range(100)]
    pods.append(("p-late", 4000, 8192, 1, 1000, "", "LS", "Running", day * 30, day * 31, day * 30))
    pods.append(("p-first", 1000, 1024, 0, 0, "", "LS", "Running", 0, 10, 0))
    return (read_nodes(write_nodes(tmp_path / "n.csv", nodes)),
            read_pods(write_pods(tmp_path / "p.csv", pods)))


def test_alibaba_timed_window_is_sized_to_the_load(tmp_path):
    nodes, pods = _openb(tmp_path)
    doc = build_timed_scenario(nodes, pods, start_day=10, days=2, load=1.0)
    assert len(doc["jobs"]) == 100  # only the window's pods
    assert {t["name"] for t in doc["teams"]} == {"ls", "be"}
    assert all(j["runtime_s"] == 3595.0 for j in doc["jobs"])  # deletion - scheduled
    assert min(j["submit_at_s"] for j in doc["jobs"]) == 0.0
    # one node of each model is kept at least; work 100 x 3595 GPU-s over 2 days at speeds
    # T4 1.0 and V100M16 3.0 needs far less than 20 nodes
    assert doc["_meta"]["nodes_kept"] == 2
    big = build_timed_scenario(nodes, pods, start_day=10, days=2, load=0.001)
    assert big["_meta"]["nodes_kept"] == 20  # never more than the trace has


def test_suite_runs_every_policy_and_checks_the_goals(tmp_path):
    nodes, pods = _openb(tmp_path)
    scen = tmp_path / "tiny.yaml"
    scen.write_text(
        "trace: {format: alibaba-openb, nodes: n.csv, pods: p.csv,\n"
        "        options: {start_day: 10, days: 1, load: 2.0}}\n")
    # a coarse bound (the default's slots cost minutes here): valid all the same
    doc = run_suite([str(scen)], ["gpuq", "kueue", "volcano", "slurm"], slots=100)
    runs = doc["scenarios"]["tiny"]["runs"]
    assert set(runs) == {"gpuq", "kueue", "volcano", "slurm"}
    for r in runs.values():
        assert r["summary"]["finished"] == 100
    bound = doc["scenarios"]["tiny"]["bound"]
    for r in runs.values():  # no policy beats the LP lower bound
        assert bound["jct_mean_s"] <= r["summary"]["jct_mean_s"] + 1e-6
    g = goals(runs, bound)
    assert g is not None and {"jct", "worst_team_p99", "closed", "max_team_slowdown",
                              "thrown_away_pct", "all"} <= set(g)
    assert g["not_finished"]["gpuq"] == 0
    out = tmp_path / "report"
    assert main([str(scen), "--policies", "gpuq,slurm", "--out", str(out), "--no-plots",
                 "--bound-slots", "100"]) == 0
    text = (out / "report.md").read_text()
    assert "| gpuq |" in text and "| slurm |" in text and "Goals" in text
    assert json.loads((out / "suite.json").read_text())["policies"] == ["gpuq", "slurm"]
    # the headline table: a row per scenario, a cell per policy, the goals' four measures
    head = headline_table(doc).splitlines()
    assert head[0].endswith("| gpuq | kueue | volcano | slurm |") and len(head) == 3
    cells = [c.strip() for c in head[2].strip("|").split("|")]
    assert cells[0] == "tiny" and len(cells) == 5
    g = runs["gpuq"]["summary"]
    assert cells[1] == (f"{g['jct_mean_s'] / 3600:,.2f} / {g['worst_team_wait_p99_s'] / 3600:,.1f}"
                        f" / {g['jain_slowdown']:.3f} / {g['thrown_away_pct']:.1f}")


def _runs(gpuq: float, best: float) -> dict:
    def s(jct: float) -> dict:
        return {"summary": {"jct_mean_s": jct, "worst_team_wait_p99_s": 0.0,
                            "max_team_slowdown": 1.0, "jain_slowdown": 1.0,
                            "thrown_away_pct": 0.0}}
    return {"gpuq": s(gpuq), "slurm": s(best)}


def test_the_gap_goal_is_the_share_closed_and_at_the_bound_when_there_is_no_gap():
    bound = {"jct_mean_s": 100.0}
    # a gap of 40 s: closing 30 % means gpuq at most 128 s
    assert goals(_runs(128.0, 140.0), bound)["closed"]["met"]
    assert goals(_runs(128.0, 140.0), bound)["closed"]["share"] == 0.3
    assert not goals(_runs(129.0, 140.0), bound)["closed"]["met"]
    # the best baseline at the bound: nothing to close; met only by being there too
    at = goals(_runs(100.0, 100.0), bound)
    assert at["closed"]["share"] is None and at["closed"]["met"] and at["all"]
    above = goals(_runs(100.5, 100.0), bound)
    assert not above["closed"]["met"] and not above["all"]


def test_runs_of_separate_processes_combine_into_one_report(tmp_path):
    a = {"load_average": 1.0, "policies": ["gpuq"],
         "scenarios": {"s1": {"path": "s1.yaml", "runs": {"gpuq": {"x": 1}}}}}
    b = {"load_average": 3.0, "policies": ["gpuq", "slurm"],
         "scenarios": {"s1": {"path": "s1.yaml", "runs": {"slurm": {"x": 2}}},
                       "s2": {"path": "s2.yaml", "runs": {"gpuq": {"x": 3}}}}}
    doc = combine([a, b])
    assert doc["policies"] == ["gpuq", "slurm"] and doc["load_average"] == 3.0
    assert set(doc["scenarios"]["s1"]["runs"]) == {"gpuq", "slurm"}
    assert doc["scenarios"]["s2"]["runs"]["gpuq"] == {"x": 3}


def test_a_re_run_baselines_tuning_replaces_the_stored_one_and_keeps_the_others():
    stored = {"load_average": 1.0, "policies": ["gpuq", "kueue", "slurm"],
              "scenarios": {"s1": {"path": "s1.yaml", "bound": {"jct_mean_s": 5.0},
                                   "runs": {"gpuq": {"x": 1}, "kueue": {"x": 2},
                                            "slurm": {"x": 3}}}},
              "tuning": {"kueue": {"chosen_label": "k"}, "slurm": {"chosen_label": "old"}}}
    rerun = {"load_average": 2.0, "policies": ["slurm"],
             "scenarios": {"s1": {"path": "s1.yaml", "runs": {"slurm": {"x": 4}}}},
             "tuning": {"slurm": {"chosen_label": "new"}}}
    doc = combine([stored, rerun])
    assert doc["tuning"] == {"kueue": {"chosen_label": "k"}, "slurm": {"chosen_label": "new"}}
    assert list(doc["tuning"]) == ["kueue", "slurm"]
    assert doc["scenarios"]["s1"]["runs"] == {"gpuq": {"x": 1}, "kueue": {"x": 2},
                                               "slurm": {"x": 4}}
    assert doc["scenarios"]["s1"]["bound"] == {"jct_mean_s": 5.0}
    assert doc["policies"] == ["gpuq", "kueue", "slurm"]


def test_readme_table_is_the_committed_evaluation_report():
    """README's Evaluation table is readme_table of docs/eval/windows/suite.json, word for
    word, and the chosen settings it names are the report's, so a re-run of the evaluation
    that is not copied into the README shows here."""
    from app.simulate.suite import chosen_line, readme_table

    root = Path(__file__).resolve().parents[2]
    doc = json.loads((root / "docs/eval/windows/suite.json").read_text())
    readme = (root / "README.md").read_text()
    assert readme_table(doc) in readme
    flat = readme.replace("\n", " ")
    assert chosen_line(doc) in flat
    # the goal's count as the report counts it (app.simulate.suite.over_windows)
    w = over_windows(doc)
    assert f"{w['met']['all']} of {w['windows']}" in flat
    assert f"gap {w['met']['closed']}, P99 {w['met']['worst_team_p99']}" in flat
    assert len(doc["scenarios"]) >= 10  # the goal is stated over at least 10 windows

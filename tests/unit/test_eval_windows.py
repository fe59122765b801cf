"""Generated evaluation windows, the tuning/evaluation split, and the tuned suite."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from app.simulate import windows as win
from app.simulate.baseline_tuning import GRIDS, label, score
from app.simulate.suite import check_disjoint, main, over_windows, readme_table, run_tuned
from tests.unit.openb_fixtures import write_nodes, write_pods


def _philly(path: Path) -> Path:
    """Ten days of a small Philly-shaped trace: 40 jobs a day over three clusters."""
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for d in range(10):
        for i in range(40):
            g = (1, 1, 2, 8)[i % 4]
            lines.append(f"2017-10-{d + 1:02d} {i % 24:02d}:{i:02d}:00,{300 + 60 * i},{g},"
                         f"{g * (300 + 60 * i)},{('aa', 'bb', 'cc')[i % 3]}")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


SPEC = {"tuning_every": 3,
        "philly": {"first": "2017-10-01", "last": "2017-10-09", "every_days": 1, "days": 1,
                   "loads": [0.8, 1.0, 1.2], "min_jobs": 10}}


def test_windows_are_generated_disjoint_and_split(tmp_path):
    _philly(tmp_path / win.PHILLY_PATH)
    ws = win.generate(SPEC, tmp_path)
    assert len(ws) == 9
    roles = [w.role for w in ws]
    assert roles == ["tuning", "evaluation", "evaluation"] * 3
    # the loads do not line up with the split: the tuning windows get every load
    assert sorted(w.options["load"] for w in ws if w.role == "tuning") == [0.8, 1.0, 1.2]
    assert all(w.jobs == 40 for w in ws)
    win.check_disjoint(ws)
    paths = win.write(ws, tmp_path / "out", "../../traces")
    assert len(list((tmp_path / "out/tuning").glob("*.yaml"))) == 3
    doc = yaml.safe_load(paths[0].read_text())
    assert doc["trace"]["format"] == "philly" and doc["trace"]["options"]["days"] == 1.0


def test_windows_skip_by_job_count_and_refuse_overlap(tmp_path):
    _philly(tmp_path / win.PHILLY_PATH)
    spec = json.loads(json.dumps(SPEC))
    spec["philly"]["min_jobs"] = 41  # no day has more than 40
    assert win.generate(spec, tmp_path) == []
    spec["philly"].update(min_jobs=0, every_days=1, days=2)
    with pytest.raises(ValueError, match="overlap"):
        win.generate(spec, tmp_path)


def test_the_suite_refuses_a_window_in_both_sets(tmp_path):
    a = tmp_path / "a.yaml"
    b = tmp_path / "b.yaml"
    a.write_text("trace: {format: philly, path: t/p.csv, options: {start: '2017-10-01 00:00:00',"
                 " days: 2, load: 1.0}}\n")
    b.write_text("trace: {format: philly, path: t/p.csv, options: {start: '2017-10-02 00:00:00',"
                 " days: 1, load: 0.8}}\n")
    with pytest.raises(ValueError, match="overlap"):
        check_disjoint([str(a)], [str(b)])
    with pytest.raises(ValueError, match="both"):
        check_disjoint([str(a)], [str(a)])
    b.write_text(b.read_text().replace("2017-10-02", "2017-10-03"))
    check_disjoint([str(a)], [str(b)])  # adjacent, not overlapping


def test_score_is_relative_to_each_windows_best_and_ties_go_to_the_first():
    res = {"w1": {"a": {"jct_mean_s": 100.0, "worst_team_wait_p99_s": 10.0},
                  "b": {"jct_mean_s": 200.0, "worst_team_wait_p99_s": 10.0}},
           "w2": {"a": {"jct_mean_s": 1000.0, "worst_team_wait_p99_s": 40.0},
                  "b": {"jct_mean_s": 1000.0, "worst_team_wait_p99_s": 20.0}}}
    s = score(res)
    assert s["a"] == pytest.approx((1.0 + (1.0 + 640 / 620) / 2) / 2)
    assert s["b"] == pytest.approx(((2.0 + 1.0) / 2 + 1.0) / 2)
    # a P99 of 0 does not make every other one equal (nor infinitely worse)
    z = score({"w": {"a": {"jct_mean_s": 1.0, "worst_team_wait_p99_s": 0.0},
                     "b": {"jct_mean_s": 1.0, "worst_team_wait_p99_s": 6000.0}}})
    assert z["a"] == 1.0 and z["b"] == pytest.approx((1 + 11) / 2)
    assert label({}) == "defaults" and label({"priority_max_age_s": 86400.0}).endswith("=1d")
    for p, grid in GRIDS.items():  # the upstream defaults come first in every grid
        assert grid[0] == {}, p
    # Kueue: CPU and memory covered (the ordinary ClusterQueue) before its uncovered twin,
    # so a tie keeps the covered one
    kq = GRIDS["kueue"]
    for i, s in enumerate(kq):
        if s.get("cover_cpu_memory"):
            twin = {k: v for k, v in s.items() if k != "cover_cpu_memory"}
            assert twin in kq[i + 1:], s


def test_tuned_suite_chooses_on_tuning_windows_and_reports_over_windows(tmp_path):
    _philly(tmp_path / "traces" / win.PHILLY_PATH)
    spec = json.loads(json.dumps(SPEC))
    spec["philly"].update(last="2017-10-04")
    ws = win.generate(spec, tmp_path / "traces")
    win.write(ws, tmp_path / "w", "../../traces")
    tune = sorted(str(p) for p in (tmp_path / "w/tuning").glob("*.yaml"))
    ev = sorted(str(p) for p in (tmp_path / "w/evaluation").glob("*.yaml"))
    doc = run_tuned(tune, ev, ["gpuq", "slurm", "fifo-typed"], bound=False)
    t = doc["tuning"]
    assert set(t) == {"slurm", "fifo-typed"}
    assert set(t["slurm"]["scores"]) == {label(g) for g in GRIDS["slurm"]}
    assert t["slurm"]["chosen"] in GRIDS["slurm"]
    assert set(t["slurm"]["windows"]) == {Path(p).stem for p in tune}  # tuned there only
    assert set(doc["scenarios"]) == {Path(p).stem for p in ev}
    for sc in doc["scenarios"].values():
        assert sc["runs"]["slurm"].get("settings", {}) == t["slurm"]["chosen"]
    ow = over_windows(doc)
    assert ow["windows"] == len(ev) and 0 <= ow["met"]["all"] <= len(ev)
    assert ow["policies"]["gpuq"]["jct_mean_s"] is not None
    assert readme_table(doc).count("\n") == len(ev) + 1
    out = tmp_path / "rep"
    assert main(["--tune", *tune, "--evaluate", *ev, "--policies", "gpuq,fifo-typed",
                 "--out", str(out), "--no-plots", "--no-bound"]) == 0
    text = (out / "report.md").read_text()
    assert "## Tuning" in text and "## Over the windows" in text and "All goals met on" in text


def test_alibaba_windows(tmp_path):
    day = 86400
    nodes = [(f"n-{i:02d}", 64000, 262144, 8, "T4" if i % 2 else "V100M16") for i in range(4)]
    pods = [(f"p-{i:03d}", 4000, 8192, 1, 1000, "", "LS", "Running",
             day * (i % 8) + i * 60, day * (i % 8) + i * 60 + 600, day * (i % 8) + i * 60)
            for i in range(160)]
    (tmp_path / win.ALIBABA_NODES).parent.mkdir(parents=True)
    write_nodes(tmp_path / win.ALIBABA_NODES, nodes)
    write_pods(tmp_path / win.ALIBABA_PODS, pods)
    ws = win.generate({"alibaba": {"first": 0, "last": 6, "every_days": 2, "days": 2,
                                   "loads": [1.0], "tuning_every": 2}}, tmp_path)
    assert [w.role for w in ws] == ["tuning", "evaluation"] * 2
    assert [w.jobs for w in ws] == [40, 40, 40, 40]


@pytest.mark.parametrize("argv", [
    ["--tune", "t.yaml", "--policies", "gpuq"],  # wrote an empty suite.json
    ["s.yaml", "--tune", "t.yaml"],  # the scenario file was dropped
    ["s.yaml", "--tune", "t.yaml", "--evaluate", "e.yaml"],
    ["s.yaml", "--combine", "a.json"],
])
def test_the_suite_refuses_arguments_it_would_drop(tmp_path, capsys, argv):
    with pytest.raises(SystemExit) as e:
        main([*argv, "--out", str(tmp_path / "out"), "--no-plots"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "--tune" in err and not (tmp_path / "out").exists()

"""Philly scenario builder and trace scenarios, on generated CSVs."""

from __future__ import annotations

import random
from datetime import datetime

from app.domain.config import load_config, load_config_text
from app.simulate.all_policies import POLICIES
from app.simulate.command import run_simulate
from app.simulate.philly import build_scenario, read_jobs, write_scenario
from app.simulate.replay import Simulator, to_json
from app.simulate.traces import scenario_from_trace
from tests.unit.openb_fixtures import random_trace


def _philly_csv(path, n=60, seed=0):
    rng = random.Random(seed)
    lines = ["timestamp,duration,num_gpus,gpu_time,cluster"]
    for _ in range(n):
        t = f"2017-10-09 {rng.randint(0, 5):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        g = rng.choice([1, 1, 1, 2, 4, 8, 16, 32])
        d = rng.choice([60.0, 200.0, 1800.0, 7200.0])
        lines.append(f"{t},{d},{g},{g * d},{rng.choice(['aa11', 'bb22', 'cc33'])}")
    lines.append("2017-10-10 08:00:00,100.0,1,100.0,aa11")  # outside the window
    path.write_text("\n".join(lines) + "\n")
    return path


def test_rule_and_sizing(tmp_path):
    jobs = read_jobs(_philly_csv(tmp_path / "p.csv"))
    doc = build_scenario(jobs, start=datetime(2017, 10, 9), hours=6, load=0.8, max_gpus=16)
    meta = doc["_meta"]
    assert meta["jobs_in_window"] == 60
    assert len(doc["jobs"]) == 60 - meta["jobs_left_out"]
    assert {t["name"] for t in doc["gpu_types"]} == {"a100-80g", "v100-32g", "rtx4090-24g"}
    for j in doc["jobs"]:
        r = j["resources"]
        assert j["team"].startswith("c-")
        if "replicas" in j:
            assert r["gpus"] == 8 and r["min_gpu_memory_gb"] == 40
        elif r.get("gpus", 0) >= 2:
            assert r["min_gpu_memory_gb"] == 32
        elif "gpu_share" in r:
            assert j["runtime_s"] < 300
    a100 = next(n for n in doc["nodes"] if n["gpu_type"] == "a100-80g")
    assert a100["count"] >= 2  # the 16-GPU gangs fit
    # capacity x window x load covers the work
    speed_cards = sum(n["count"] * 8 * {"a100-80g": 2, "v100-32g": 1, "rtx4090-24g": 1.2}[
        n["gpu_type"]] for n in doc["nodes"])
    assert speed_cards * 6 * 3600 * 0.8 >= meta["gpu_seconds"]
    out = tmp_path / "s.yaml"
    write_scenario(doc, out)
    cfg = load_config(out)
    assert len(cfg.jobs) == len(doc["jobs"])


def test_philly_trace_scenario_replays_for_every_policy(tmp_path):
    _philly_csv(tmp_path / "p.csv", n=30, seed=2)
    cfg = load_config_text(
        "trace: {format: philly, path: p.csv, options: {start: '2017-10-09 00:00:00', hours: 6}}")
    for name, policy in POLICIES.items():
        model = scenario_from_trace(cfg, tmp_path)
        doc = to_json(Simulator(model, policy, name).run())
        assert doc["summary"]["jobs"] == len(model.specs)
        assert doc["summary"]["finished"] + doc["summary"]["failed"] + doc["summary"].get(
            "unschedulable", 0) <= doc["summary"]["jobs"]


def test_openb_trace_replay_via_command(tmp_path):
    random_trace(tmp_path, 4, n_nodes=4, n_pods=20)
    scen = tmp_path / "s.yaml"
    scen.write_text("trace: {format: alibaba-openb, nodes: nodes.csv, pods: pods.csv}\n")
    assert run_simulate(str(scen), policy="fifo-typed", out=str(tmp_path / "r.json"),
                        report=str(tmp_path / "rep")) == 0
    assert (tmp_path / "rep" / "wait_cdf.png").exists()
    assert "| fifo-typed |" in (tmp_path / "rep" / "report.md").read_text()

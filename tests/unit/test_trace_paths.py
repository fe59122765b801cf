"""Scenario trace paths: relative to the scenario file (docs/api.md), else found in the
trace folder of ``--trace-dir`` / ``GPUQ_TRACE_DIR``; the committed scenarios read
``eval/traces/`` (filled by ``make traces``), never a folder outside the repository."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from app.cli import app
from app.simulate.command import ScenarioInputError, load_scenario, run_simulate
from app.simulate.traces import trace_file
from tests.unit.openb_fixtures import random_trace
from tests.unit.test_philly_builder import _philly_csv

SCENARIO = ("trace: {format: philly, path: ../../elsewhere/traces/philly/p.csv,\n"
            "        options: {start: '2017-10-09 00:00:00', hours: 6}}\n")


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Path, Path]:
    """A checkout (tmp/co/eval/s.yaml) whose trace path does not exist, the traces elsewhere."""
    scen = tmp_path / "co" / "eval" / "s.yaml"
    scen.parent.mkdir(parents=True)
    scen.write_text(SCENARIO)
    traces = tmp_path / "data" / "traces"
    (traces / "philly").mkdir(parents=True)
    _philly_csv(traces / "philly" / "p.csv", n=20, seed=3)
    return scen, traces


def test_not_found_names_the_places_and_the_remedy(layout, monkeypatch):
    scen, _ = layout
    monkeypatch.delenv("GPUQ_TRACE_DIR", raising=False)
    with pytest.raises(ScenarioInputError) as e:
        load_scenario(scen)
    msg = str(e.value)
    assert "elsewhere/traces/philly/p.csv not found" in msg
    assert "--trace-dir" in msg and "GPUQ_TRACE_DIR" in msg


def test_trace_dir_argument_and_environment_find_the_trace(layout, monkeypatch):
    scen, traces = layout
    monkeypatch.delenv("GPUQ_TRACE_DIR", raising=False)
    assert len(load_scenario(scen, trace_dir=traces).specs) > 0
    monkeypatch.setenv("GPUQ_TRACE_DIR", str(traces))
    assert len(load_scenario(scen).specs) > 0


def test_beside_the_scenario_wins_over_the_trace_dir(tmp_path: Path):
    (tmp_path / "t").mkdir()
    own = tmp_path / "t" / "p.csv"
    own.write_text("x")
    other = tmp_path / "other"
    (other / "t").mkdir(parents=True)
    (other / "t" / "p.csv").write_text("y")
    assert trace_file(tmp_path, "t/p.csv", "path", other) == own
    assert trace_file(tmp_path / "nowhere", "t/p.csv", "path", other) == other / "t" / "p.csv"


def test_cli_reads_gpuq_trace_dir(layout, tmp_path, monkeypatch):
    scen, traces = layout
    monkeypatch.delenv("GPUQ_TRACE_DIR", raising=False)
    out = tmp_path / "r.json"
    r = CliRunner().invoke(app, ["simulate", str(scen), "--out", str(out)],
                           env={"GPUQ_TRACE_DIR": str(traces)})
    assert r.exit_code == 0, r.output
    assert out.is_file()
    r = CliRunner().invoke(app, ["simulate", str(scen), "--trace-dir", str(tmp_path / "none")])
    assert r.exit_code == 2


def test_fill_protocol_uses_the_trace_dir(tmp_path: Path):
    traces = tmp_path / "traces"
    traces.mkdir()
    random_trace(traces, 4, n_nodes=4, n_pods=20)
    scen = tmp_path / "eval" / "fill.yaml"
    scen.parent.mkdir()
    scen.write_text("trace: {format: alibaba-openb, nodes: ../../elsewhere/traces/nodes.csv,\n"
                    "        pods: ../../elsewhere/traces/pods.csv}\n")
    assert run_simulate(str(scen), protocol="fill", policy="bestfit", seeds="1",
                        out=str(tmp_path / "f.json")) == 2
    assert run_simulate(str(scen), protocol="fill", policy="bestfit", seeds="1",
                        out=str(tmp_path / "f.json"), trace_dir=str(traces)) == 0

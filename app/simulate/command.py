"""`gpuq simulate`: load a scenario, replay it, write the result JSON.

The fill protocol (``--protocol fill``), trace scenarios and ``--report``
are provided by their own modules (app.simulate.fill, app.simulate.traces,
app.simulate.report) when present; this command only dispatches.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import ValidationError

from app.domain.config import load_config, validation_problems
from app.domain.errors import error_block, error_line, unknown
from app.domain.yaml_input import YamlInputError, read_yaml_file
from app.simulate.all_policies import POLICY_NAMES, make_policy
from app.simulate.baseline_tuning import build, label, parse_settings
from app.simulate.fill_command import run_fill_command
from app.simulate.replay import ScenarioModel, Simulator, to_json
from app.simulate.report import write_report
from app.simulate.scenario_info import describe
from app.simulate.traces import scenario_from_trace


class ScenarioInputError(ValueError):
    """The scenario file cannot be replayed (the message says why; ``context``: a
    malformed file's lines around the problem, printed below it)."""

    def __init__(self, message: str, context: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.context = context


def _is_windows_rule(path: Path) -> bool:
    """``eval/windows.yaml`` (app/simulate/windows.py's input) sits beside the scenarios
    under eval/, and a user trying every eval/*.yaml got "unknown key 'tuning_every'"."""
    try:
        doc = read_yaml_file(path)
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and "tuning_every" in doc and bool(
        {"philly", "alibaba"} & set(doc))


def load_scenario(scenario: str | Path, trace_dir: str | Path | None = None) -> ScenarioModel:
    """A scenario file (jobs or a trace) as the model the simulator replays; a trace's
    relative paths are relative to the file, else under ``trace_dir`` /
    ``$GPUQ_TRACE_DIR`` (:func:`app.simulate.traces.trace_file`)."""
    path = Path(scenario)
    if not path.is_file():
        raise ScenarioInputError(f"scenario file not found: {scenario}")
    try:
        cfg = load_config(path)
    except ValidationError as e:
        if _is_windows_rule(path):
            raise ScenarioInputError(
                f"{scenario} is the rule that generates the evaluation's windows, not a "
                f"scenario: simulate one of the windows it generated (eval/windows/tuning/"
                f"*.yaml, eval/windows/evaluation/*.yaml), or regenerate them with `python "
                f"-m app.simulate.windows {scenario} --out eval/windows`") from None
        raise ScenarioInputError(error_block(f"invalid scenario {scenario}",
                                             validation_problems(e))) from None
    except YamlInputError as e:  # malformed, or over a bound: the message names the file
        raise ScenarioInputError(str(e), e.context) from None
    except Exception as e:
        raise ScenarioInputError(f"cannot read scenario {scenario}: {e}") from None
    if cfg.trace is None:
        return ScenarioModel.from_config(cfg)
    try:
        return scenario_from_trace(cfg, base=path.parent, trace_dir=trace_dir)
    except (OSError, ValueError, KeyError) as e:
        raise ScenarioInputError(f"cannot read the trace of {scenario}: {e}") from None


def run_simulate(
    scenario: str,
    *,
    policy: str = "gpuq",
    settings: str | None = None,
    seed: int = 42,
    out: str | None = None,
    report: str | None = None,
    protocol: str | None = None,
    inflate: float = 1.3,
    seeds: str | None = None,
    trace_dir: str | None = None,
) -> int:
    """Exit code: 0 ok, 2 bad input (message on stderr)."""
    if protocol not in (None, "replay"):
        if settings is not None:
            print(error_line("--settings is for a baseline's replay, not the fill protocol"),
                  file=sys.stderr)
            return 2
        if protocol != "fill":
            print(error_line(f"unknown protocol {protocol!r}; known: replay, fill"),
                  file=sys.stderr)
            return 2

        # the fill protocol has its own policies (random, bestfit, fgd, gpuq = the live core)
        return int(run_fill_command(scenario, policy=policy, seed=seed, out=out, report=report,
                                    inflate=inflate, seeds=seeds, trace_dir=trace_dir))
    if policy not in POLICY_NAMES:
        print(error_line(unknown("policy", policy, POLICY_NAMES)),
              file=sys.stderr)
        return 2
    chosen = None
    if settings is not None:
        try:  # the model's own checks (a value it does not know) run when it is built
            chosen = parse_settings(policy, settings)
            made = build(policy, chosen)
        except (ValueError, TypeError) as e:
            print(error_line(f"--settings: {e}"), file=sys.stderr)
            return 2
    else:
        made = make_policy(policy)
    try:
        model = load_scenario(scenario, trace_dir)
    except ScenarioInputError as e:
        print(error_line(e), file=sys.stderr)
        return 2
    sim = Simulator(model, made, policy, seed)
    doc = to_json(sim.run())
    doc["scenario"] = describe(model, load_config(Path(scenario)), scenario)
    if chosen is not None:
        doc["settings"] = label(chosen)
    text = json.dumps(doc, indent=1)
    if out:
        Path(out).write_text(text)
    s = doc["summary"]
    name = f"{policy} ({label(chosen)})" if chosen is not None else policy
    print(
        f"{name}: {s['jobs']} jobs, {s['finished']} finished, {s['not_started']} not started, "
        f"makespan {s['makespan_s']:.0f}s, "
        f"wait p50 {s['wait_p50_s']:.0f}s p99 {s['wait_p99_s']:.0f}s, "
        f"jct p50 {s['jct_p50_s']:.0f}s"
    )
    if report:
        write_report(doc, report)
    return 0

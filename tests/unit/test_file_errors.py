"""Errors in config and scenario files read as one block per problem, in a person's
words, with the fix where there is one (a bad scenario once printed pydantic's dump,
its documentation URL on every line, folded onto one line)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from pydantic import ValidationError

from app.domain.config import GpuqConfig, validation_problems
from app.domain.errors import error_block, error_line

BAD = """\
gpu_types:
  - {name: a100, memory_gb: "lots", weight: 10}
nodes:
  - {name: n1, gpu_type: a100, gpus: 4, cpu: 8, memory_gb: 64, colour: red}
teams:
  - {name: nlp, pool: training, quota: 5}
jobs:
  - {name: j, team: nlp, resources: {gpu: 2}}
"""


def test_each_problem_is_one_line_that_says_the_fix():
    import yaml

    with pytest.raises(ValidationError) as e:
        GpuqConfig.model_validate(yaml.safe_load(BAD))
    problems = validation_problems(e.value)
    assert "gpu_types[0].memory_gb: expected a number, got 'lots'" in problems
    assert any(p.startswith("nodes[0]: unknown key 'colour'") for p in problems), problems
    assert any("did you mean quota_units?" in p for p in problems), problems
    assert "jobs[0].resources: unknown key 'gpu' (did you mean gpus?)" in problems
    assert not any("pydantic" in p or "https://" in p or "Input should" in p for p in problems)


def test_a_job_key_at_the_wrong_level_says_where_it_goes():
    """The old hint named the key given: "unknown key 'gpus' (did you mean gpus?)"."""
    import yaml

    text = BAD.split("jobs:")[0].replace("colour: red", "rack: r1").replace("quota:", "weight:")
    text += ("jobs:\n  - {name: j, team: nlp, gpus: 2, resources: {gpus: 1}}\n"
             "  - {name: k, team: nlp, resources: {gpus: 1, priority: P1}}\n")
    with pytest.raises(ValidationError) as e:
        GpuqConfig.model_validate(yaml.safe_load(text))
    problems = validation_problems(e.value)
    assert "jobs[0]: unknown key 'gpus' here (in a job spec it goes in resources: " \
        "resources.gpus)" in problems, problems
    assert "jobs[1].resources: unknown key 'priority' here (in a job spec it goes at the " \
        "top level, beside resources: priority)" in problems, problems


def test_a_block_keeps_the_greppable_first_line():
    block = error_block("invalid config f.yaml", ["a: x", "b: y"])
    assert block.splitlines() == ["gpuq: error: invalid config f.yaml: 2 problems",
                                  "  - a: x", "  - b: y"]
    assert error_line(block) == block  # passed up unchanged
    assert error_block("invalid config f.yaml", ["a: x"]) == \
        "gpuq: error: invalid config f.yaml: a: x"


@pytest.mark.parametrize("command", [["simulate"], ["config", "apply", "--dry-run"]])
def test_the_commands_print_the_block_and_exit_2(tmp_path, command):
    f = tmp_path / "bad.yaml"
    f.write_text(BAD)
    r = subprocess.run([sys.executable, "-m", "app.cli", *command, str(f)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert lines[0].startswith("gpuq: error: invalid ") and "problems" in lines[0], lines
    assert "  - gpu_types[0].memory_gb: expected a number, got 'lots'" in lines
    assert "pydantic" not in r.stderr and "errors.pydantic.dev" not in r.stderr


MALFORMED = "name: x\nteam: nlp\nresources: {gpus: 1\n  gpu_types: [v100-16g]\n"


@pytest.mark.parametrize("command", [
    ["simulate"], ["config", "apply", "--dry-run"],
    ["submit", "--url", "http://127.0.0.1:1", "--token", "t", "-f"],
])
def test_malformed_yaml_shows_the_lines_and_a_caret(tmp_path, command):
    # the caret context was folded onto the one error line ("... line 3, column 12:
    # resources: {gpus: 1 ^ expected ..."), naming "<unicode string>" for the file
    f = tmp_path / "bad.yaml"
    f.write_text(MALFORMED)
    r = subprocess.run([sys.executable, "-m", "app.cli", *command, str(f)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.rstrip("\n").splitlines()
    assert lines[0] == (f"gpuq: error: {f}: not valid YAML at line 4, column 12: expected ',' "
                        "or '}', but got ':' (in a flow mapping that starts at line 3, "
                        "column 12)"), lines
    assert lines[1:] == ["    2 | team: nlp", "    3 | resources: {gpus: 1",
                         "    4 |   gpu_types: [v100-16g]", "      |            ^"], lines
    assert "<unicode string>" not in r.stderr


@pytest.mark.parametrize("team, words", [
    ("{name: nlp, pool: training, max_priority: P7}", "team nlp: unknown max_priority 'P7'"),
    ("{name: nlp, pool: training, default_priority: P9}",
     "team nlp: unknown default_priority 'P9'"),
    ("{name: nlp, pool: training, default_priority: P0, max_priority: P2}",
     "team nlp: default_priority P0 is above max_priority P2"),
    ("{name: nlp, pool: training, default_priority: P2, max_priority: P1}\njobs:\n"
     "  - {name: j, team: nlp, priority: P0, resources: {gpus: 1}}",
     "jobs[0]: team nlp may name priority classes up to P1 (max_priority); P0 is above it"),
])
def test_a_teams_priority_classes_are_checked_in_the_file(team, words):
    import yaml

    text = f"pools:\n  - {{name: training}}\nteams:\n  - {team}\n"
    with pytest.raises(ValidationError) as e:
        GpuqConfig.model_validate(yaml.safe_load(text))
    assert any(words in p for p in validation_problems(e.value)), validation_problems(e.value)
    ok = "{name: nlp, pool: training, default_priority: P2, max_priority: P1}"
    GpuqConfig.model_validate(yaml.safe_load(text.replace(team, ok).replace("P0,", "P1,")))

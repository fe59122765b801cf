"""Config and scenario files are bounded: size, alias expansion, node count.

A 356-byte "billion laughs" config ran ``gpuq config apply --dry-run`` past 60 s
and 1.2 GB; three node entries of ``count: 100000`` took 1.9 GB.
"""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner

from app.domain.config import MAX_NODES, load_config, load_config_text
from app.domain.yaml_input import MAX_YAML_BYTES, YamlInputError, load_yaml
from app.simulate.command import ScenarioInputError, load_scenario

# nine levels of ten aliases: 10^9 values once expanded, 356 bytes on disk
BOMB = "\n".join(
    ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    + [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
)


def bomb_config() -> str:
    # the bomb where the schema accepts any value (scheduler knobs of loops and alerts)
    return BOMB.replace("a0: &a0", "scheduler:\n  x: &a0", 1).replace("\na", "\n  a")


def test_billion_laughs_in_a_config_is_refused_before_anything_walks_it():
    with pytest.raises(YamlInputError, match="aliases"):
        load_config_text(bomb_config(), source="bomb.yaml")


def test_billion_laughs_in_a_scenario_is_refused(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(bomb_config())
    with pytest.raises(ScenarioInputError, match="aliases"):
        load_scenario(path)


def test_recursive_alias_is_refused():
    with pytest.raises(YamlInputError, match="recursive"):
        load_yaml("a: &x [1, *x]")
    with pytest.raises(YamlInputError, match="recursive"):
        load_yaml("a: &x {b: {c: *x}}")


def test_aliases_within_the_bounds_keep_working():
    text = """
gpu_types:
  - &t {name: a100, memory_gb: 80, weight: 1.0}
  - {<<: *t, name: a100-b}
nodes:
  - {name: n, gpu_type: a100, gpus: 8, count: 3}
"""
    cfg = load_config_text(text)
    assert [t.name for t in cfg.gpu_types] == ["a100", "a100-b"]
    assert cfg.gpu_types[1].memory_gb == 80
    # a moderately shared subtree expands fine: 10^4 values
    assert len(load_yaml("a: &a [1,1,1,1,1,1,1,1,1,1]\nb: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a,*a]\n"
                         "c: [*b,*b,*b,*b,*b,*b,*b,*b,*b,*b]")["c"]) == 10


def test_document_size_is_bounded(tmp_path):
    big = "# " + "x" * MAX_YAML_BYTES + "\n"
    with pytest.raises(YamlInputError, match="bytes"):
        load_yaml(big)
    path = tmp_path / "big.yaml"
    path.write_text(big)
    with pytest.raises(YamlInputError, match="bytes"):
        load_config(path)


def test_node_count_is_bounded():
    three = "\n".join(
        ["gpu_types: [{name: a100, memory_gb: 80, weight: 1}]", "nodes:"]
        + [f"  - {{name: n{i}, gpu_type: a100, gpus: 8, count: 7000}}" for i in range(3)])
    with pytest.raises(ValidationError, match=f"more than {MAX_NODES:,}"):
        load_config_text(three)
    with pytest.raises(ValidationError, match="count"):
        load_config_text("nodes: [{name: n, count: 100000}]")
    assert len(load_config_text(three.replace("7000", "6000")).expanded_nodes()) == 18_000


def test_config_apply_dry_run_answers_the_bomb_with_an_error(tmp_path):
    from app.cli import app

    path = tmp_path / "bomb.yaml"
    path.write_text(bomb_config())
    res = CliRunner().invoke(app, ["config", "apply", "--dry-run", str(path)])
    assert res.exit_code == 2, res.output
    assert "aliases" in res.output

"""The policy names `gpuq simulate --help` lists are the simulator's (cli.py keeps them as
text so `gpuq --help` does not import the simulator)."""

from app import cli
from app.simulate.all_policies import POLICY_NAMES
from app.simulate.fill import FILL_POLICIES


def test_listed_policies_are_the_real_ones():
    assert tuple(cli.SIM_POLICIES.split(", ")) == POLICY_NAMES
    assert tuple(cli.FILL_POLICIES.split(", ")) == FILL_POLICIES


def test_a_misspelt_policy_gets_the_nearest_and_the_list(tmp_path):
    import subprocess
    import sys

    f = tmp_path / "s.yaml"
    f.write_text("jobs: []\n")
    for extra, expect in ((["--policy", "kueu"], "unknown policy 'kueu' (did you mean kueue? "),
                          (["--protocol", "fill", "--policy", "fgdd"],
                           "unknown fill policy 'fgdd' (did you mean fgd? known: ")):
        r = subprocess.run([sys.executable, "-m", "app.cli", "simulate", str(f), *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and expect in r.stderr, r.stderr


def test_every_command_help_has_real_metavars():
    """No "<str>", "<int>" or "<bool>" beside an option and no "{file}" in a usage line, in
    the help of any command (serve, api, dispatcher and config apply still had them;
    typer writes an argument's type beside its name, "JOB_ID <str>", which stays)."""
    import re

    import typer
    from typer.testing import CliRunner

    def walk(cmd, path: list[str]):  # typer 0.29 carries its own click: no isinstance
        yield path
        for name, sub in (getattr(cmd, "commands", None) or {}).items():
            yield from walk(sub, [*path, name])

    paths = list(walk(typer.main.get_command(cli.app), []))
    assert ["serve"] in paths and ["config", "apply"] in paths and ["nodes", "cordon"] in paths
    bad = []
    for path in paths:
        out = CliRunner().invoke(cli.app, [*path, "--help"]).output
        assert "Usage:" in out, (path, out)
        # an option shown with its type ("--port <int>") or a lower-case usage argument
        bad += [(" ".join(path), m) for m in re.findall(
            r"^\s+--?[\w-]+(?:, --?[\w-]+)* <\w+>|^Usage:.*\{[a-z_]+\}", out, re.M)]
    assert bad == []

"""The policy names `gpuq simulate --help` lists are the simulator's (cli.py keeps them as
text so `gpuq --help` does not import the simulator)."""

from gpuq import cli
from gpuq.simulate.fill import FILL_POLICIES
from gpuq.simulate.policies import POLICY_NAMES


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
        r = subprocess.run([sys.executable, "-m", "gpuq.cli", "simulate", str(f), *extra],
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2 and expect in r.stderr, r.stderr

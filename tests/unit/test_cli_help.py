"""The policy names `gpuq simulate --help` lists are the simulator's (cli.py keeps them as
text so `gpuq --help` does not import the simulator)."""

from gpuq import cli
from gpuq.simulate.fill import FILL_POLICIES
from gpuq.simulate.policies import POLICY_NAMES


def test_listed_policies_are_the_real_ones():
    assert tuple(cli.SIM_POLICIES.split(", ")) == POLICY_NAMES
    assert tuple(cli.FILL_POLICIES.split(", ")) == FILL_POLICIES

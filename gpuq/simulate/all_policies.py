"""The simulator's baselines and models of other queues register themselves in the
core's policy table (:mod:`gpuq.scheduling.policies`), one module each
(:mod:`gpuq.simulate.baselines`). Importing this module is what makes their names
known: ``gpuq simulate``, the suite and the tests import it; the live server does
not, so production never loads a baseline.

The fill protocol's policies are the same baselines in the shape that protocol asks
for (:data:`gpuq.simulate.fill.FILL_POLICIES`).
"""

from __future__ import annotations

from gpuq.scheduling.policies import (
    FACTORIES,
    POLICIES,
    get_policy,
    make_policy,
    policy_names,
    register,
    register_factory,
)
from gpuq.simulate.baselines.bestfit import best_fit
from gpuq.simulate.baselines.fifo import fifo_count, fifo_typed
from gpuq.simulate.baselines.kueue import kueue
from gpuq.simulate.baselines.random_fit import random_fit
from gpuq.simulate.baselines.slurm import slurm
from gpuq.simulate.baselines.volcano import volcano

for _name, _policy in (("fifo-count", fifo_count), ("fifo-typed", fifo_typed),
                       ("random", random_fit), ("bestfit", best_fit)):
    register(_name, _policy)
for _name, _factory in (("kueue", kueue), ("volcano", volcano), ("slurm", slurm)):
    register_factory(_name, _factory)

POLICY_NAMES: tuple[str, ...] = policy_names()

__all__ = ["FACTORIES", "POLICIES", "POLICY_NAMES", "get_policy", "make_policy"]

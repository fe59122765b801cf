"""The simulator's baselines and models of other queues register themselves in the
core's policy table (:mod:`app.scheduling.policies`), one module each
(:mod:`app.simulate.baselines`). Importing this module is what makes their names
known: ``gpuq simulate``, the suite and the tests import it; the live server does
not, so production never loads a baseline.

The fill protocol's policies are the same baselines in the shape that protocol asks
for (:data:`app.simulate.fill.FILL_POLICIES`).
"""

from __future__ import annotations

from app.scheduling.policies import (
    FACTORIES,
    POLICIES,
    get_policy,
    make_policy,
    policy_names,
    register,
    register_factory,
)
from app.simulate.baselines.bestfit import best_fit
from app.simulate.baselines.fifo import fifo_count, fifo_typed
from app.simulate.baselines.kueue import kueue
from app.simulate.baselines.random_fit import random_fit
from app.simulate.baselines.slurm import slurm
from app.simulate.baselines.volcano import volcano

for _name, _policy in (("fifo-count", fifo_count), ("fifo-typed", fifo_typed),
                       ("random", random_fit), ("bestfit", best_fit)):
    register(_name, _policy)
for _name, _factory in (("kueue", kueue), ("volcano", volcano), ("slurm", slurm)):
    register_factory(_name, _factory)

POLICY_NAMES: tuple[str, ...] = policy_names()

__all__ = ["FACTORIES", "POLICIES", "POLICY_NAMES", "get_policy", "make_policy"]

"""Scheduling policies by name: the live core, its baselines and the models of
other queues, one module each (:mod:`app.simulate.baselines`).

``get_policy`` serves the dispatcher, the tuner's what-if and the estimated
starts (stateless policies: the same object may decide every pass);
``make_policy`` serves ``gpuq simulate`` and builds a fresh object for each
run, because the Slurm model keeps decayed usage between cycles. The fill
protocol's policies are the same baselines in the shape that protocol asks
for (:data:`app.simulate.fill.FILL_POLICIES`).
"""

from __future__ import annotations

from collections.abc import Callable

from app.scheduling.engine import schedule
from app.scheduling.model import Policy
from app.simulate.baselines.bestfit import best_fit
from app.simulate.baselines.fifo import fifo_count, fifo_typed
from app.simulate.baselines.kueue import kueue
from app.simulate.baselines.random_fit import random_fit
from app.simulate.baselines.slurm import slurm
from app.simulate.baselines.volcano import volcano

POLICIES: dict[str, Policy] = {
    "gpuq": schedule,
    "fifo-count": fifo_count,
    "fifo-typed": fifo_typed,
    "random": random_fit,
    "bestfit": best_fit,
}
BASELINE_MODELS: dict[str, Callable[[], Policy]] = {
    "kueue": kueue,
    "volcano": volcano,
    "slurm": slurm,
}
POLICY_NAMES: tuple[str, ...] = (*POLICIES, *BASELINE_MODELS)


def get_policy(name: str) -> Policy:
    """A stateless policy by name (the live core or a FIFO/Random/BestFit baseline)."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


def make_policy(name: str) -> Policy:
    """A fresh policy object for one simulation run."""
    if name in BASELINE_MODELS:
        return BASELINE_MODELS[name]()
    if name in POLICIES:
        return POLICIES[name]
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICY_NAMES))}")

"""Policies by name for ``gpuq simulate``: the live core, its FIFO baselines and the
simulator-only models of Kueue, Volcano and Slurm (:mod:`app.simulate.baselines`).

A policy is built fresh for each run (:func:`make_policy`): the Slurm model
keeps decayed usage between cycles, so one object must never serve two runs.
"""

from __future__ import annotations

from collections.abc import Callable

from app.scheduling.policies import POLICIES as CORE_POLICIES
from app.scheduling.policies import Policy
from app.simulate.baselines.kueue import kueue
from app.simulate.baselines.slurm import slurm
from app.simulate.baselines.volcano import volcano

BASELINE_MODELS: dict[str, Callable[[], Policy]] = {
    "kueue": kueue,
    "volcano": volcano,
    "slurm": slurm,
}
POLICY_NAMES: tuple[str, ...] = (*CORE_POLICIES, *BASELINE_MODELS)


def make_policy(name: str) -> Policy:
    """A fresh policy object for one simulation run."""
    if name in BASELINE_MODELS:
        return BASELINE_MODELS[name]()
    if name in CORE_POLICIES:
        return CORE_POLICIES[name]
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICY_NAMES))}")

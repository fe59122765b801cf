"""Scheduling policies by name: the core's ``gpuq`` and whatever registers itself.

Production (the dispatcher, the tuner, the estimated starts) looks a policy up
here and so depends on the core only. The simulator's baselines (FIFO, Random,
BestFit and the models of Kueue, Volcano and Slurm) register themselves when
:mod:`app.simulate.all_policies` is imported, so ``gpuq simulate``, the suite and
the tests that compare gpuq with them see every name, and the live server
never imports them.

Two kinds of entry: a *policy* (stateless: the same object may decide every
pass) and a *factory* (a fresh policy object per simulated run: the Slurm
model keeps decayed usage between cycles). ``get_policy`` serves stateless
policies only; ``make_policy`` serves both.
"""

from __future__ import annotations

from collections.abc import Callable

from app.scheduling.engine import schedule
from app.scheduling.model import Policy

POLICIES: dict[str, Policy] = {"gpuq": schedule}
FACTORIES: dict[str, Callable[[], Policy]] = {}


def register(name: str, policy: Policy) -> None:
    """Add a stateless policy under ``name`` (a name is registered once)."""
    if name in FACTORIES or POLICIES.get(name, policy) is not policy:
        raise ValueError(f"policy {name!r} is already registered")
    POLICIES[name] = policy


def register_factory(name: str, factory: Callable[[], Policy]) -> None:
    """Add a policy that needs a fresh object per run (built by ``factory``)."""
    if name in POLICIES or FACTORIES.get(name, factory) is not factory:
        raise ValueError(f"policy {name!r} is already registered")
    FACTORIES[name] = factory


def policy_names() -> tuple[str, ...]:
    """Every registered name, stateless policies first, in registration order."""
    return (*POLICIES, *FACTORIES)


def get_policy(name: str) -> Policy:
    """A stateless policy by name."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(POLICIES))}") from None


def make_policy(name: str) -> Policy:
    """A policy object for one run: a factory's fresh object, else the stateless policy."""
    if name in FACTORIES:
        return FACTORIES[name]()
    if name in POLICIES:
        return POLICIES[name]
    raise ValueError(f"unknown policy {name!r}; known: {', '.join(sorted(policy_names()))}")

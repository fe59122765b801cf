"""The time-integrated deficit: how much each team has been owed, decayed and capped.

Ordering teams by the *instantaneous* share they hold forgets the past: a
team whose big job found every card taken looks no poorer after a day of
waiting than after a minute, so something else (an aging knob) had to end
its wait. Here each team carries a **deficit** ``D``: the integral of its
entitlement minus what it held (:mod:`app.scheduling.entitlements`, both in
type-speed cards), exponentially decayed with time constant ``H``
(``SchedulerConfig.fair_horizon_s``)::

    D(t + dt) = D(t) e^(-dt/H) + (E - A) H (1 - e^(-dt/H))

(the exact integral for ``E - A`` constant over the interval, which is what
a cycle sees). A waiting team gains credit at the rate it is short of its
entitlement, and the decay is also the cap: ``D <= H max(E - A)``, further
clipped to ``[0, H E]`` with this cycle's ``E``. Credit, never debt: a team
that held more than its entitlement (cards nobody else could use then, or
a burst of short jobs) goes back to zero instead of paying it back later --
with debt, the Philly team of 352 short jobs, bursty, waited behind every
other team's backlog (its worst jobs hours; the worst team's mean slowdown
2.9 -> 9.1). A team with no work (``E = 0``) has nothing owed and drops
out, so the state never grows with teams that left.

The state is carried by the caller: ``Snapshot.fair`` in, ``CycleResult.fair``
out (the simulator keeps it between cycles; the dispatcher in memory between
passes). The core itself reads no clock: ``dt`` is ``now - FairState.at``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from app.scheduling.model import FairState

EPS = 1e-9


def advance(
    prev: FairState | None,
    now: float,
    entitled: Mapping[str, float],
    held: Mapping[str, float],
    horizon_s: float,
) -> FairState:
    """The deficits at ``now``, from ``prev`` and the entitlement/holding of the interval."""
    old = prev.deficit if prev is not None else {}
    dt = max(0.0, now - prev.at) if prev is not None else 0.0
    h = max(horizon_s, EPS)
    keep = math.exp(-dt / h)
    gain = h * (1.0 - keep)
    out: dict[str, float] = {}
    for team, e in entitled.items():
        if e <= EPS:
            continue
        d = old.get(team, 0.0) * keep + (e - held.get(team, 0.0)) * gain
        out[team] = min(h * e, max(0.0, d))
    return FairState(now, out)


def team_key(deficit: float, entitled: float, held: float, horizon_s: float) -> tuple[float, float]:
    """The order of teams, lowest first: what the team holds per unit of its entitlement
    (the team furthest below its entitlement goes first), then its credit (per unit of
    entitlement over the horizon: the team owed more goes first).

    Credit breaks ties rather than adding to the holding: added, a backlog team whose big
    jobs never fit (owed for hours, so its credit near the cap) went before a light team
    holding nothing, and the light team's 10-second jobs waited hours (Philly, 2 days at
    0.8). What credit must guarantee -- that a team short of its entitlement for long gets
    its job started -- it does through the reservation it earns
    (:meth:`app.scheduling.engine.Cycle.owed`)."""
    e = max(entitled, EPS)
    return (held / e, -deficit / (max(horizon_s, EPS) * e))

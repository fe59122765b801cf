"""Weight tuning without oscillation (retune hourly at most, only on a trigger).

What is tuned: the **GPU type weights** (CU per whole card, the demo
cluster's A100=10 / V100=4 / 4090=2). They are the price of a card in quotas and
fair shares. The tuner moves prices toward demand: a type that jobs queue
for gets dearer, a type that sits idle gets cheaper, so quota-bound and
type-flexible work (``gpu_units``, several allowed types) shifts onto the
idle cards. Score weights are left to people: they change placement, not
who may run.

Rules, each a small function tests exercise on its own:

1. **Triggers only** (:func:`find_triggers`): the type-imbalance alert;
   pending jobs in inference pools above a threshold; a training job
   waiting longer than 1 hour. No trigger, no proposal.
2. **Cooldown**: nothing is proposed within ``cooldown_s`` (1 hour) of
   the last proposal, change or rejected attempt.
3. **Bounded step**: each change moves a weight by at most ``max_step``
   (20%) and keeps it within ``[min_factor, max_factor]`` x its
   configured (base) weight, so drift is bounded too.
4. **Hysteresis**: a type's weight is not moved back against its last
   change within ``hysteresis_s``; after a change up it cannot flip down
   on the next trigger.
5. **What-if gate** (:func:`what_if`): in ``auto`` mode the recent window
   is replayed through the simulator with the old and the new weights; the
   change applies only if predicted P99 wait improves and no team's P99
   gets worse by more than ``team_margin``. Which way helps depends on why
   jobs wait (for quota: cheaper cards help; for cards: dearer scarce cards
   steer flexible work away), so the mirrored change is weighed too and the
   better passing one wins. ``recommend`` runs the same replay (when one is
   available) and records a passing change as ``proposed`` (a failing one as
   ``rejected``), changing nothing.

Every decision carries its trigger and figures, so the history says why.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Mode = Literal["off", "recommend", "auto"]
MODES: tuple[str, ...] = ("off", "recommend", "auto")
Action = Literal[
    "off", "busy", "no_trigger", "cooldown", "no_change", "proposed", "applied", "rejected"
]
RECORDED_ACTIONS = frozenset({"proposed", "applied", "rejected"})


@dataclass(frozen=True, slots=True)
class TunerConfig:
    """Knobs; ``PUT /v1/tuning`` changes them (validated by the API schema)."""

    mode: Mode = "recommend"
    interval_s: float = 60.0
    cooldown_s: float = 3600.0
    max_step: float = 0.2
    min_factor: float = 0.5
    max_factor: float = 2.0
    hysteresis_s: float = 6 * 3600.0
    inference_pools: tuple[str, ...] = ("inference",)
    inference_pending_threshold: int = 20
    training_pools: tuple[str, ...] = ("training",)
    training_wait_s: float = 3600.0
    team_margin: float = 0.10
    min_improvement: float = 0.0
    replay_window_s: float = 6 * 3600.0

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["inference_pools"] = list(self.inference_pools)
        d["training_pools"] = list(self.training_pools)
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> TunerConfig:
        if not data:
            return cls()
        known = set(cls.__dataclass_fields__)
        kw = {k: v for k, v in data.items() if k in known}
        for k in ("inference_pools", "training_pools"):
            if k in kw:
                kw[k] = tuple(kw[k])
        return cls(**kw)


@dataclass(frozen=True, slots=True)
class TunerInputs:
    """What the loop observed, as plain numbers."""

    now: float
    weights: Mapping[str, float]  # current CU per card
    base_weights: Mapping[str, float]  # as configured before any tuning
    idle_ratio: Mapping[str, float]  # per type, 0..1 (types with capacity only)
    imbalance: tuple[tuple[str, int, tuple[str, ...]], ...] = ()  # (congested, queued, idle)
    pending_by_pool: Mapping[str, int] = field(default_factory=dict)
    pending_types_by_pool: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    training_waits: tuple[tuple[str, float, str], ...] = ()  # (job id, wait s, wanted type)
    idle_threshold: float = 0.4


@dataclass(frozen=True, slots=True)
class Trigger:
    kind: Literal["imbalance", "inference_pending", "training_wait"]
    message: str
    up: tuple[str, ...]  # types demand queues for: dearer
    down: tuple[str, ...]  # idle types: cheaper
    figures: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["up"], d["down"] = list(self.up), list(self.down)
        return d


@dataclass(frozen=True, slots=True)
class Change:
    gpu_type: str
    old: float
    new: float

    @property
    def direction(self) -> int:
        return 1 if self.new > self.old else -1


@dataclass(slots=True)
class TunerMemory:
    """What the history says about the past; rebuilt from it by :func:`memory_from_history`."""

    last_action_at: float | None = None
    last_change: dict[str, tuple[int, float]] = field(default_factory=dict)  # type -> (dir, at)


@dataclass(frozen=True, slots=True)
class ReplayOutcome:
    """Predicted waits from a replay: overall P99 and P99 per team."""

    wait_p99_s: float | None
    team_p99_s: Mapping[str, float] = field(default_factory=dict)
    jobs: int = 0


Replay = Callable[[Mapping[str, float]], ReplayOutcome]


@dataclass(frozen=True, slots=True)
class GateResult:
    passed: bool
    reason: str
    before: ReplayOutcome | None = None
    after: ReplayOutcome | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "reason": self.reason,
            "before": asdict(self.before) if self.before else None,
            "after": asdict(self.after) if self.after else None,
        }


@dataclass(frozen=True, slots=True)
class Decision:
    action: Action
    message: str
    at: float
    triggers: tuple[Trigger, ...] = ()
    changes: tuple[Change, ...] = ()
    gate: GateResult | None = None

    @property
    def recorded(self) -> bool:
        return self.action in RECORDED_ACTIONS

    def new_weights(self, weights: Mapping[str, float]) -> dict[str, float]:
        out = dict(weights)
        for c in self.changes:
            out[c.gpu_type] = c.new
        return out

    def to_dict(self) -> dict[str, Any]:
        return {
            "action": self.action,
            "message": self.message,
            "at": self.at,
            "triggers": [t.to_dict() for t in self.triggers],
            "changes": [asdict(c) for c in self.changes],
            "gate": self.gate.to_dict() if self.gate else None,
        }


# 1. triggers ---------------------------------------------------------------------------------


def idle_types(inputs: TunerInputs, exclude: Iterable[str] = ()) -> tuple[str, ...]:
    skip = set(exclude)
    return tuple(
        sorted(
            t
            for t, r in inputs.idle_ratio.items()
            if r > inputs.idle_threshold and t not in skip and t in inputs.weights
        )
    )


def find_triggers(inputs: TunerInputs, cfg: TunerConfig) -> list[Trigger]:
    out: list[Trigger] = []
    for congested, queued, idle in inputs.imbalance:
        out.append(
            Trigger(
                kind="imbalance",
                message=f"{congested}: {queued} queued while {', '.join(idle)} idle",
                up=(congested,) if congested in inputs.weights else (),
                down=tuple(t for t in idle if t in inputs.weights),
                figures={
                    "queued": queued,
                    "idle": {t: inputs.idle_ratio.get(t) for t in idle},
                },
            )
        )
    for pool in cfg.inference_pools:
        pending = inputs.pending_by_pool.get(pool, 0)
        if pending <= cfg.inference_pending_threshold:
            continue
        wanted = {
            t: n
            for t, n in inputs.pending_types_by_pool.get(pool, {}).items()
            if t in inputs.weights
        }
        up = tuple(sorted(wanted))
        out.append(
            Trigger(
                kind="inference_pending",
                message=(f"pool {pool}: {pending} pending > {cfg.inference_pending_threshold}"),
                up=up,
                down=idle_types(inputs, exclude=up),
                figures={
                    "pending": pending,
                    "threshold": cfg.inference_pending_threshold,
                    "wanted": wanted,
                },
            )
        )
    starved = [w for w in inputs.training_waits if w[1] > cfg.training_wait_s]
    if starved:
        job_id, wait, wanted_type = max(starved, key=lambda w: (w[1], w[0]))
        up = (wanted_type,) if wanted_type in inputs.weights else ()
        out.append(
            Trigger(
                kind="training_wait",
                message=f"training job {job_id} waiting {wait:.0f}s > {cfg.training_wait_s:.0f}s",
                up=up,
                down=idle_types(inputs, exclude=up),
                figures={
                    "job_id": job_id,
                    "wait_s": wait,
                    "threshold_s": cfg.training_wait_s,
                    "starved_jobs": len(starved),
                    "gpu_type": wanted_type,
                },
            )
        )
    return out


# 2-4. cooldown, bounded step, hysteresis -----------------------------------------------------


def in_cooldown(now: float, memory: TunerMemory, cfg: TunerConfig) -> bool:
    return memory.last_action_at is not None and now - memory.last_action_at < cfg.cooldown_s


def bounded_step(old: float, base: float, direction: int, cfg: TunerConfig) -> float:
    """One step of at most ``max_step`` x old, clamped to the base weight's bounds."""
    lo, hi = base * cfg.min_factor, base * cfg.max_factor
    # 4 decimals for people to read, rounded towards ``old`` so the step never exceeds max_step
    if direction > 0:
        return min(hi, math.floor(old * (1 + cfg.max_step) * 1e4 + 1e-6) / 1e4)
    return max(lo, math.ceil(old * (1 - cfg.max_step) * 1e4 - 1e-6) / 1e4)


def blocked_by_hysteresis(
    gpu_type: str, direction: int, now: float, memory: TunerMemory, cfg: TunerConfig
) -> bool:
    last = memory.last_change.get(gpu_type)
    if last is None:
        return False
    last_dir, at = last
    return last_dir != direction and now - at < cfg.hysteresis_s


def propose(
    triggers: Iterable[Trigger],
    inputs: TunerInputs,
    memory: TunerMemory,
    cfg: TunerConfig,
    *,
    mirrored: bool = False,
) -> tuple[list[Change], list[str]]:
    """Changes the triggers ask for, after bounds and hysteresis; plus why some were dropped.

    A type both asked up and down by different triggers is left alone: the
    signals disagree, and doing nothing cannot oscillate. ``mirrored`` flips
    every direction (the other candidate the what-if gate compares).
    """
    sign = -1 if mirrored else 1
    wanted: dict[str, set[int]] = {}
    for t in triggers:
        for name in t.up:
            wanted.setdefault(name, set()).add(sign)
        for name in t.down:
            wanted.setdefault(name, set()).add(-sign)
    changes: list[Change] = []
    dropped: list[str] = []
    for name in sorted(wanted):
        dirs = wanted[name]
        if len(dirs) > 1:
            dropped.append(f"{name}: triggers disagree")
            continue
        direction = dirs.pop()
        if blocked_by_hysteresis(name, direction, inputs.now, memory, cfg):
            dropped.append(f"{name}: hysteresis (last change was the other way)")
            continue
        old = inputs.weights[name]
        base = inputs.base_weights.get(name, old)
        new = bounded_step(old, base, direction, cfg)
        if abs(new - old) < 1e-9:
            dropped.append(f"{name}: at its bound ({old:g})")
            continue
        changes.append(Change(name, old, new))
    return changes, dropped


# 5. what-if gate -----------------------------------------------------------------------------


def _predicted_p99(gate: GateResult) -> float:
    """The P99 wait a passing gate predicts (what_if passes only with both replays' P99)."""
    assert gate.after is not None and gate.after.wait_p99_s is not None
    return gate.after.wait_p99_s


def what_if(
    old: Mapping[str, float], new: Mapping[str, float], replay: Replay, cfg: TunerConfig
) -> GateResult:
    """Replay with both weight sets; pass only on a better P99 that hurts no team too much."""
    before = replay(old)
    after = replay(new)
    if before.wait_p99_s is None or after.wait_p99_s is None or before.jobs == 0:
        return GateResult(False, "nothing to replay in the window", before, after)
    limit = before.wait_p99_s * (1 - cfg.min_improvement)
    if not after.wait_p99_s < limit:
        return GateResult(
            False,
            f"predicted P99 wait {after.wait_p99_s:.0f}s does not improve on "
            f"{before.wait_p99_s:.0f}s",
            before,
            after,
        )
    worse = []
    for team, b in sorted(before.team_p99_s.items()):
        a = after.team_p99_s.get(team)
        if a is not None and a > b * (1 + cfg.team_margin) + 1e-9:
            worse.append(f"{team} {b:.0f}s -> {a:.0f}s")
    if worse:
        return GateResult(
            False,
            f"teams worse by more than {cfg.team_margin:.0%}: {', '.join(worse)}",
            before,
            after,
        )
    return GateResult(
        True,
        f"predicted P99 wait {before.wait_p99_s:.0f}s -> {after.wait_p99_s:.0f}s",
        before,
        after,
    )


# the whole decision --------------------------------------------------------------------------


def decide(
    inputs: TunerInputs,
    memory: TunerMemory,
    cfg: TunerConfig,
    replay: Replay | None = None,
) -> Decision:
    """One evaluation. With a replay, two candidates are weighed: the prices-follow-demand
    change and its mirror (which way helps depends on whether jobs wait for quota or for
    cards); the trigger decides *when*, the replay decides *which way*, hysteresis and
    bounds apply to both."""
    now = inputs.now
    if cfg.mode == "off":
        return Decision("off", "tuner is off", now)
    triggers = tuple(find_triggers(inputs, cfg))
    if not triggers:
        return Decision("no_trigger", "no trigger fired", now)
    if in_cooldown(now, memory, cfg):
        assert memory.last_action_at is not None
        left = cfg.cooldown_s - (now - memory.last_action_at)
        return Decision("cooldown", f"cooldown: {left:.0f}s left", now, triggers)
    primary, dropped = propose(triggers, inputs, memory, cfg)
    mirror, _ = propose(triggers, inputs, memory, cfg, mirrored=True)
    candidates = [c for c in (primary, mirror) if c]
    if replay is None:
        candidates = candidates[:1] if primary else []
    if not candidates:
        msg = "; ".join(dropped) or "triggers name no GPU type to change"
        return Decision("no_change", msg, now, triggers)
    if replay is None:
        changes = tuple(candidates[0])
        desc = _describe(changes)
        if cfg.mode == "recommend":
            return Decision(
                "proposed", f"recommend {desc} (no replay available)", now, triggers, changes
            )
        return Decision(
            "rejected", f"{desc}: no replay available for the what-if gate", now, triggers, changes
        )
    cached = _cached(replay)
    gates = [
        (tuple(c), what_if(inputs.weights, _apply(inputs.weights, c), cached, cfg))
        for c in candidates
    ]
    passing = [(c, g) for c, g in gates if g.passed]
    if passing:
        changes, gate = min(passing, key=lambda cg: _predicted_p99(cg[1]))
    else:
        changes, gate = gates[0]
    desc = _describe(changes)
    if not gate.passed:  # in either mode: a change the replay says will not help is no advice
        return Decision("rejected", f"{desc}: {gate.reason}", now, triggers, changes, gate)
    if cfg.mode == "recommend":
        return Decision(
            "proposed", f"recommend {desc} ({gate.reason})", now, triggers, changes, gate
        )
    return Decision("applied", f"{desc}: {gate.reason}", now, triggers, changes, gate)


def _describe(changes: Iterable[Change]) -> str:
    return ", ".join(f"{c.gpu_type} {c.old:g}->{c.new:g}" for c in changes)


def _apply(weights: Mapping[str, float], changes: Iterable[Change]) -> dict[str, float]:
    return {**weights, **{c.gpu_type: c.new for c in changes}}


def _cached(replay: Replay) -> Replay:
    """Replay each weight set once (the old weights are shared by both candidates)."""
    memo: dict[tuple[tuple[str, float], ...], ReplayOutcome] = {}

    def run(weights: Mapping[str, float]) -> ReplayOutcome:
        key = tuple(sorted(weights.items()))
        if key not in memo:
            memo[key] = replay(weights)
        return memo[key]

    return run


def memory_from_history(entries: Iterable[Mapping[str, Any]]) -> TunerMemory:
    """Rebuild the tuner's memory from recorded decisions (``Decision.to_dict`` dicts)."""
    mem = TunerMemory()
    for e in sorted(entries, key=lambda e: e.get("at", 0.0)):
        if e.get("action") not in RECORDED_ACTIONS:
            continue
        at = float(e["at"])
        mem.last_action_at = at if mem.last_action_at is None else max(mem.last_action_at, at)
        if e["action"] == "applied":
            for c in e.get("changes", []):
                direction = 1 if c["new"] > c["old"] else -1
                mem.last_change[c["gpu_type"]] = (direction, at)
    return mem

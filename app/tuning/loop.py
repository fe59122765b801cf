"""The weight tuner: observe, decide (pure), record, maybe apply.

A step of the dispatcher's decision thread (a NOTIFY wakes the dispatcher,
not the tuner: a submitted job is no reason to retune before the interval).

Each pass (every ``interval_s``, default a minute; cheap when nothing
fires) builds the tuner's inputs from the dispatcher's snapshot, rebuilds
its memory from the recorded history, and calls
:func:`app.tuning.tuner.decide`. The what-if replay is built lazily: the
simulator only runs when a trigger fired outside the cooldown. The
decision and any weight change are written in one transaction.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from app.clock import to_epoch, utcnow
from app.dispatch.loops import Step
from app.reports.alerts import AlertThresholds, type_imbalance_alerts
from app.reports.live import thresholds as alert_thresholds
from app.reports.utilization import pending_by_type, utilization, wanted_type
from app.scheduling.model import Snapshot
from app.scheduling.policies import get_policy
from app.store.convert import job_request
from app.store.orm import JobRow
from app.store.snapshot import build_snapshot
from app.store.state_changes import wait_seconds
from app.tuning.store import load_history, load_state, record_decision
from app.tuning.tuner import (
    Decision,
    Replay,
    ReplayOutcome,
    TunerConfig,
    TunerInputs,
    decide,
    memory_from_history,
)
from app.tuning.whatif import DEFAULT_RUNTIME_S, Arrival, make_replay

MAX_ARRIVALS = 500
MAX_REPLAY_PENDING = 2000  # the replay keeps the queue's head: bounded cost on huge backlogs
TUNER_LOCK_KEY = 0x67707574  # "gput": one tuner pass at a time across replicas


def tuner_inputs(
    snap: Snapshot,
    base_weights: dict[str, float],
    cfg: TunerConfig,
    th: AlertThresholds,
    waits: Mapping[str, float] | None = None,
) -> TunerInputs:
    """The tuner's observation. ``waits``: pending job id -> seconds pending so far
    (across requeues); without it a job's age since submit stands in."""
    rows = utilization(snap)
    idle = {r.gpu_type: r.idle_ratio for r in rows if r.capacity_cu > 0}
    imbalance = tuple(
        (a.key or "", int(a.figures["queued"]), tuple(a.figures["idle_types"]))
        for a in type_imbalance_alerts(pending_by_type(snap), idle, th)
    )
    by_pool: Counter[str] = Counter(j.pool for j in snap.pending)
    types_by_pool: dict[str, Counter[str]] = defaultdict(Counter)
    for j in snap.pending:
        types_by_pool[j.pool][wanted_type(j, snap.pools)] += 1
    waits = waits or {}
    training = tuple(
        (j.id, waits.get(j.id, snap.now - j.submitted_at), wanted_type(j, snap.pools))
        for j in snap.pending
        if j.pool in cfg.training_pools
    )
    weights = {name: t.weight for name, t in snap.gpu_types.items()}
    return TunerInputs(
        now=snap.now,
        weights=weights,
        base_weights={k: base_weights.get(k, w) for k, w in weights.items()},
        idle_ratio=idle,
        imbalance=imbalance,
        pending_by_pool=dict(by_pool),
        pending_types_by_pool={k: dict(v) for k, v in types_by_pool.items()},
        training_waits=training,
        idle_threshold=th.imbalance_idle,
    )


def recent_arrivals(
    session: Session, snap: Snapshot, now: datetime, window_s: float
) -> list[Arrival]:
    """Jobs submitted in the last window, to arrive again with the same spacing."""
    since = now - timedelta(seconds=window_s)
    rows = list(
        session.scalars(
            select(JobRow)
            .where(JobRow.submitted_at >= since)
            .order_by(JobRow.submitted_at.desc())
            .limit(MAX_ARRIVALS)
        )
    )
    out = []
    for r in reversed(rows):
        try:
            req = job_request(r, dict(snap.priorities), dict(snap.pools))
        except ValueError:
            continue  # a spec the current schema no longer accepts: leave it out
        began = r.started_at or r.admitted_at
        if r.status == "succeeded" and r.finished_at and began:
            runtime = (r.finished_at - began).total_seconds()
        else:
            runtime = req.duration_estimate_s or DEFAULT_RUNTIME_S
        offset = (r.submitted_at - since).total_seconds()
        out.append(Arrival(offset, replace(req, id=f"replay-{r.id}"), max(1.0, runtime)))
    return out


class TunerLoop(Step):
    name = "tuner"

    def __init__(
        self,
        session_factory: sessionmaker[Session],
        *,
        clock: Callable[[], datetime] = utcnow,
        interval: float = 60.0,
        policy: str = "gpuq",
    ) -> None:
        super().__init__(interval)
        self.session_factory = session_factory
        self.clock = clock
        self.policy = policy
        self.last: Decision | None = None

    def run_once(self) -> Decision:
        with self.session_factory() as session:
            now = self.clock()
            state = load_state(session)
            cfg = TunerConfig.from_dict(state["config"])
            self.interval = cfg.interval_s  # PUT /v1/tuning may change the pace
            if cfg.mode == "off":
                self.last = Decision("off", "tuner is off", to_epoch(now))
                return self.last
            if not session.scalar(select(func.pg_try_advisory_xact_lock(TUNER_LOCK_KEY))):
                return Decision("busy", "another tuner pass is running", to_epoch(now))
            snap = build_snapshot(session, now).snapshot
            waits = {
                str(r.id): wait_seconds(r, now)
                for r in session.scalars(
                    select(JobRow).where(
                        JobRow.status == "pending", JobRow.pool.in_(cfg.training_pools)
                    )
                )
            }
            inputs = tuner_inputs(
                snap, state["base_weights"], cfg, alert_thresholds(session), waits
            )
            memory = memory_from_history(load_history(session))
            cache: dict[str, Replay] = {}

            # the replay is built on first use: only when a proposal exists
            def replay(weights: Mapping[str, float]) -> ReplayOutcome:
                if "fn" not in cache:
                    arrivals = recent_arrivals(session, snap, now, cfg.replay_window_s)
                    head = sorted(snap.pending, key=lambda j: (-j.priority_value, j.submitted_at))
                    cache["fn"] = make_replay(
                        replace(snap, pending=head[:MAX_REPLAY_PENDING]),
                        arrivals,
                        policy=get_policy(self.policy),
                        horizon_s=2 * cfg.replay_window_s,  # the window, then drain
                    )
                return cache["fn"](weights)

            decision = decide(inputs, memory, cfg, replay)
            record_decision(session, decision)
            session.commit()
        self.last = decision
        if decision.recorded:
            self.log.info("tuner %s: %s", decision.action, decision.message)
        return decision

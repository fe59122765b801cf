"""The weight tuner: mode and knobs, proposals and changes (writes: admin)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from app.api.deps import AdminDep, AdminWriteDep, PrincipalDep, SessionDep
from app.domain.errors import InputError
from app.domain.people import for_people
from app.domain.spec import DnsLabel, OptInt
from app.store.orm import PoolRow
from app.tuning.loop import TunerLoop
from app.tuning.store import current_weights, load_history, load_state, save_config
from app.tuning.tuner import TunerConfig

router = APIRouter(prefix="/v1/tuning", tags=["tuning"])


class TuningUpdate(BaseModel):
    """Any subset of the tuner's knobs; the rest keep their values."""

    # strict: a JSON true is not the number 1 (the schema says number)
    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Literal["off", "recommend", "auto"] | None = Field(
        default=None, description="`off`; `recommend`: record proposals, change nothing; "
        "`auto`: apply the changes the replay says help",
    )
    cooldown_s: float | None = Field(
        default=None, ge=0, le=30 * 86400, description="at most one proposal or change per "
        "this many seconds",
    )
    max_step: float | None = Field(
        default=None, gt=0, le=1, description="largest change of a weight in one step "
        "(0.2: 20%)",
    )
    min_factor: float | None = Field(
        default=None, gt=0, le=1, description="lowest weight, as a factor of the "
        "configured one",
    )
    max_factor: float | None = Field(
        default=None, ge=1, le=100, description="highest weight, as a factor of the "
        "configured one",
    )
    hysteresis_s: float | None = Field(
        default=None, ge=0, le=30 * 86400, description="seconds before a type's weight may "
        "move back against its last change",
    )
    inference_pools: list[DnsLabel] | None = Field(
        default=None, max_length=64, description="pools whose pending jobs trigger a proposal"
    )
    inference_pending_threshold: OptInt = Field(
        default=None, ge=0, le=1_000_000, description="pending jobs in the inference pools "
        "above which a proposal is triggered",
    )
    training_pools: list[DnsLabel] | None = Field(
        default=None, max_length=64, description="pools whose long waits trigger a proposal"
    )
    training_wait_s: float | None = Field(
        default=None, ge=0, description="a training-pool job waiting longer triggers a "
        "proposal",
    )
    team_margin: float | None = Field(
        default=None, ge=0, le=10, description="a change may not worsen any team's P99 wait "
        "by more than this (0.1: 10%)",
    )
    min_improvement: float | None = Field(
        default=None, ge=0, lt=1, description="smallest predicted P99 improvement for a "
        "change to apply (0: any)",
    )
    replay_window_s: float | None = Field(
        default=None, gt=0, le=7 * 86400, description="seconds of past arrivals the what-if "
        "replay runs forward",
    )
    interval_s: float | None = Field(
        default=None, gt=0, le=86400, description="seconds between tuner passes"
    )


def _body(session: SessionDep) -> dict[str, Any]:
    state = load_state(session)
    history = load_history(session)

    def latest(action: str) -> dict[str, Any] | None:
        return next((e for e in reversed(history) if e["action"] == action), None)

    return for_people({
        **state,
        "weights": current_weights(session),
        "last_proposal": latest("proposed"),
        "last_change": latest("applied"),
    })


@router.get("")
def get_tuning(session: SessionDep, _: PrincipalDep) -> dict[str, Any]:
    """Mode, knobs, current and configured weights, and the last evaluation."""
    return _body(session)


@router.put("")
def put_tuning(body: TuningUpdate, session: SessionDep, by: AdminWriteDep) -> dict[str, Any]:
    cfg = TunerConfig.from_dict(load_state(session)["config"])
    patch = body.model_dump(exclude_none=True)
    known = set(session.scalars(select(PoolRow.name)))
    for field in ("inference_pools", "training_pools"):
        unknown = sorted(set(patch.get(field, [])) - known)
        if unknown:
            raise InputError(f"unknown pool(s) {', '.join(unknown)}", field)
    new = TunerConfig.from_dict({**cfg.to_dict(), **patch})
    save_config(session, new)
    if new.to_dict() != cfg.to_dict():
        by.record(session, "update", "tuning", "config", cfg.to_dict(), new.to_dict())
    session.commit()
    return _body(session)


@router.get("/history")
def tuning_history(
    session: SessionDep,
    _: PrincipalDep,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    action: Literal["proposed", "applied", "rejected"] | None = None,
) -> dict[str, Any]:
    """Recorded proposals, changes and rejections, newest first, with triggers and figures."""
    items = [e for e in reversed(load_history(session)) if action is None or e["action"] == action]
    return for_people({"items": items[:limit]})


@router.post("/evaluate")
def evaluate_now(request: Request, _: AdminDep) -> dict[str, Any]:
    """Run one tuner pass now (same rules: triggers, cooldown, bounds, gate)."""

    loop = TunerLoop(request.app.state.session_factory, clock=request.app.state.clock)
    return for_people(loop.run_once().to_dict())

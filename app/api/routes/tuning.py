"""The weight tuner: mode and knobs, proposals and changes (writes: admin)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import select

from app.api.deps import AdminDep, AdminWriteDep, PrincipalDep, SessionDep
from app.dispatch.tuner import TunerLoop
from app.domain.errors import InputError
from app.domain.people import for_people
from app.domain.spec import OptInt
from app.store.orm import PoolRow
from app.tuning.store import current_weights, load_history, load_state, save_config
from app.tuning.tuner import TunerConfig

router = APIRouter(prefix="/v1/tuning", tags=["tuning"])


class TuningUpdate(BaseModel):
    """Any subset of the tuner's knobs; the rest keep their values."""

    # strict: a JSON true is not the number 1 (the schema says number)
    model_config = ConfigDict(extra="forbid", strict=True)

    mode: Literal["off", "recommend", "auto"] | None = None
    cooldown_s: float | None = Field(default=None, ge=0, le=30 * 86400)
    max_step: float | None = Field(default=None, gt=0, le=1)
    min_factor: float | None = Field(default=None, gt=0, le=1)
    max_factor: float | None = Field(default=None, ge=1, le=100)
    hysteresis_s: float | None = Field(default=None, ge=0, le=30 * 86400)
    inference_pools: list[str] | None = Field(default=None, max_length=64)
    inference_pending_threshold: OptInt = Field(default=None, ge=0, le=1_000_000)
    training_pools: list[str] | None = Field(default=None, max_length=64)
    training_wait_s: float | None = Field(default=None, ge=0)
    team_margin: float | None = Field(default=None, ge=0, le=10)
    min_improvement: float | None = Field(default=None, ge=0, lt=1)
    replay_window_s: float | None = Field(default=None, gt=0, le=7 * 86400)
    interval_s: float | None = Field(default=None, gt=0, le=86400)


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

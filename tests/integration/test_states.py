"""The state-rule function: forbidden transitions, timestamps, wait accounting."""

from __future__ import annotations

import pytest

from app.domain.spec import JobSpec
from app.domain.states import InvalidTransition
from app.store.jobs import submit_job
from app.store.state_changes import change_state, wait_seconds


def _job(session, clock):
    spec = JobSpec.model_validate({"name": "s", "team": "nlp", "resources": {"gpus": 1}})
    return submit_job(session, spec, now=clock()).job


def test_terminal_states_are_final(session_factory, demo, clock):
    with session_factory() as s:
        job = _job(s, clock)
        change_state(s, job, "admitted", now=clock())
        change_state(s, job, "running", now=clock())
        change_state(s, job, "succeeded", now=clock())
        for to in ("running", "pending", "cancelled", "failed"):
            with pytest.raises(InvalidTransition):
                change_state(s, job, to, now=clock())
        assert job.status == "succeeded"
        with pytest.raises(InvalidTransition):
            change_state(s, _job(s, clock), "running", now=clock())  # pending -> running
        s.rollback()


def test_wait_counts_every_pending_period(session_factory, demo, clock):
    with session_factory() as s:
        job = _job(s, clock)
        clock.advance(10)
        change_state(s, job, "admitted", now=clock())
        assert job.admitted_at == clock()
        clock.advance(100)  # running time does not count
        change_state(s, job, "running", now=clock())
        change_state(s, job, "pending", now=clock(), event_type="preempted")
        assert job.preemption_count == 1 and job.started_at is None
        clock.advance(5)
        assert wait_seconds(job, clock()) == 15.0
        change_state(s, job, "admitted", now=clock())
        clock.advance(50)
        assert wait_seconds(job, clock()) == 15.0
        # a requeue that is not a preemption (bind failure) does not count as one
        change_state(s, job, "pending", now=clock(), event_type="bind_failed")
        assert job.preemption_count == 1
        s.rollback()


def test_revisions_increase(session_factory, demo, clock):
    """Every change takes a new, higher revision (the picture and the
    dispatcher's stale-write checks rely on it)."""
    with session_factory() as s:
        jobs = [_job(s, clock) for _ in range(3)]
        s.flush()
        values = [j.revision for j in jobs]
        for to in ("admitted", "running", "pending", "admitted", "running", "succeeded"):
            for j in jobs:
                why = "preempted" if to == "pending" else None
                change_state(s, j, to, now=clock(), event_type=why)
                values.append(j.revision)
        assert values == sorted(values) and len(set(values)) == len(values)
        s.rollback()

"""The simulated cluster: run time, failure injection, idempotent bind, and
refusing a device that is already in use."""

from __future__ import annotations

import pytest

from app.clock import ManualClock
from app.cluster.interface import BindError, BindRequest
from app.cluster.simulated import SimulatedCluster
from app.scheduling.model import ReplicaPlacement


def req(job_id: str, devices=(0, 1), node="n0", duration=100.0, mig=()) -> BindRequest:
    p = ReplicaPlacement(0, node, "a100", devices=tuple(devices), mig=tuple(mig), units=10)
    return BindRequest(job_id, job_id, "t", "p", "P1", [p], duration_s=duration)


def test_job_runs_for_its_duration_scaled_by_speed():
    clock = ManualClock()
    c = SimulatedCluster(clock=clock, speed=2.0)
    c.bind(req("a"))
    assert [e.phase for e in c.poll_events()] == ["running"]
    clock.advance(49)
    assert c.poll_events() == [] and c.running_job_ids() == {"a"}
    clock.advance(1)
    [ev] = c.poll_events()
    assert (ev.job_id, ev.phase) == ("a", "succeeded")
    assert c.running_job_ids() == set()


def test_failure_injection_and_bind_failure():
    clock = ManualClock()
    c = SimulatedCluster(clock=clock)
    c.bind(req("a"))
    c.poll_events()
    c.fail_job("a", "OOM")
    [ev] = c.poll_events()
    assert (ev.phase, ev.message) == ("failed", "OOM")
    c.fail_bind("b", "no")
    with pytest.raises(BindError):
        c.bind(req("b"))
    c.bind(req("b"))  # only the first bind fails
    assert "b" in c.running_job_ids()


def test_bind_is_idempotent_and_refuses_double_use():
    c = SimulatedCluster(clock=ManualClock())
    c.bind(req("a", devices=(0, 1)))
    c.bind(req("a", devices=(0, 1)))  # same job again: no-op
    assert c.bind_calls["a"] == 2 and len(c.pods) == 1
    with pytest.raises(BindError, match="already in use"):
        c.bind(req("b", devices=(1, 2)))
    c.bind(req("c", devices=(2, 3)))
    c.bind(req("m1", devices=(4,), mig=((4, 0, "3g.40gb"),)))
    with pytest.raises(BindError):
        c.bind(req("m2", devices=(4,), mig=((4, 0, "3g.40gb"),)))
    c.bind(req("m3", devices=(4,), mig=((4, 1, "3g.40gb"),)))
    c.stop("a", "cancel")
    c.stop("a", "cancel")  # idempotent
    c.bind(req("b", devices=(1, 0)))

"""The nodes a job avoids after a kubelet refused it: bounded, and forgotten in time."""

from __future__ import annotations

from app.cluster.k8s_pods import rejected_on
from app.cluster.k8s_rejections import RejectedNodes


class Clock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_a_refused_node_is_avoided_until_it_expires() -> None:
    clock = Clock()
    r = RejectedNodes(ttl_s=300, clock=clock)
    r.add("7", "a100-0")
    assert r.current() == {"7": frozenset({"a100-0"})}
    clock.t = 299
    r.add("7", "a100-1")
    assert r.current() == {"7": frozenset({"a100-0", "a100-1"})}
    clock.t = 300  # the race was lost, not the node: worth a try again
    assert r.current() == {"7": frozenset({"a100-1"})}
    clock.t = 600
    assert r.current() == {}


def test_it_is_bounded_per_job_and_in_jobs() -> None:
    r = RejectedNodes(ttl_s=300, per_job=2, max_jobs=3, clock=Clock())
    for n in ("n0", "n1", "n2"):
        r.add("1", n)
    for j in ("2", "3", "4"):
        r.add(j, "n0")
    got = r.current()
    assert set(got) == {"2", "3", "4"}  # the least recently refused job is forgotten
    r.add("2", "n1")
    r.add("2", "n2")
    assert r.current()["2"] == frozenset({"n1", "n2"})  # the oldest node is forgotten


def test_only_admission_refusals_name_a_node() -> None:
    def pod(phase: str, reason: str) -> dict:
        return {"spec": {"nodeName": "a100-0"}, "status": {"phase": phase, "reason": reason}}

    assert rejected_on(pod("Failed", "OutOfnvidia.com/gpu")) == "a100-0"
    assert rejected_on(pod("Failed", "UnexpectedAdmissionError")) == "a100-0"
    assert rejected_on(pod("Failed", "NodeAffinity")) == "a100-0"
    assert rejected_on(pod("Failed", "Evicted")) is None  # pressure: the node is fine later
    assert rejected_on(pod("Running", "")) is None

"""Bounded calls and a watchdog: a hung apiserver cannot wedge the dispatcher.

Against an apiserver path that accepts a request and never answers (FakeKube.hang:
what a real control plane cannot be made to do on demand), every call gpuq makes
returns within its timeout, a silent watch marks the cache stale (no pass plans on
it, /healthz fails), failed list/watch rounds back off with jitter, and a pass that
overruns its bound steps down and ends the process.
"""

from __future__ import annotations

import threading

import pytest

from app.cluster.interface import BindError, BindRequest
from app.cluster.kubernetes import StaleCache
from app.cluster.simulated import SimulatedCluster
from app.dispatch.dispatcher import Dispatcher
from app.dispatch.loops import Step
from app.domain.backoff import Backoff
from app.scheduling.model import ReplicaPlacement
from tests.fakekube.fixtures import elector, make_cluster, wait_until
from tests.fakekube.objects import article_a100

HANG_S = 60.0  # far beyond every bound the tests set: a call still blocked is hung


def _req(job_id: str = "7") -> BindRequest:
    return BindRequest(job_id=job_id, name="train", team="nlp", pool="training",
                       priority="P1", world_size=1, placements=[
                           ReplicaPlacement(0, "a100-0", "a100-80g", (0,), units=10, cpu=8,
                                            memory_gb=64)])


def _in_thread(fn) -> tuple[threading.Thread, list]:
    out: list = []

    def run() -> None:
        try:
            out.append(fn())
        except BaseException as e:  # noqa: BLE001 - the test inspects it
            out.append(e)

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t, out


@pytest.fixture
def bounded(kube):
    kube.add_node(article_a100("a100-0"))
    c = make_cluster(kube, request_timeout_s=2.0, watch_idle_timeout_s=1.0,
                     informer_stale_s=3.0)
    for inf in c.informers:  # quick retries once the apiserver answers again
        inf.backoff = Backoff(initial_s=0.05, cap_s=0.5)
    c.start(wait_s=10)
    wait_until(lambda: c.list_nodes())
    yield c
    kube.unhang()
    c.close()


def _gang(job_id: str = "8") -> BindRequest:
    return BindRequest(job_id=job_id, name="ddp", team="nlp", pool="training",
                       priority="P1", world_size=2, placements=[
                           ReplicaPlacement(i, "a100-0", "a100-80g", (i,), units=10, cpu=8,
                                            memory_gb=64) for i in range(2)])


def test_bind_against_an_apiserver_that_never_answers_returns(kube, bounded):
    """The Binding POST of a gang's Pod gets no answer: bind() gives up after its
    timeout, undoes the created Pods and raises, instead of blocking the dispatcher's
    thread for good."""
    kube.hang(r"^POST .*/binding")
    t, out = _in_thread(lambda: bounded.bind(_gang()))
    t.join(HANG_S)
    assert not t.is_alive(), "bind() still blocked on a hung apiserver"
    assert isinstance(out[0], BindError), out
    kube.unhang()
    wait_until(lambda: kube.gpuq_pods() == [])  # the undo's delete went through


def test_a_bound_create_answered_after_its_timeout_is_deleted(kube, bounded):
    """A job of one Pod is created bound. Its create gets no answer in time, so the bind
    is undone, but the API server makes the Pod after all (it held the request): the
    next pass deletes it, it would run beside the job's next attempt otherwise."""
    kube.hang(r"^POST /api/v1/namespaces/[^/]+/pods(\?|$)")
    t, out = _in_thread(lambda: bounded.bind(_req()))
    t.join(HANG_S)
    assert isinstance(out[0], BindError), out
    kube.unhang()  # the held create is carried out now: a Pod bound to a100-0
    wait_until(lambda: bounded.pods.get(f"{kube.gpuq_pods()[0]['metadata']['namespace']}/"
                                        f"{kube.gpuq_pods()[0]['metadata']['name']}")
               if kube.gpuq_pods() else False)
    assert kube.gpuq_pods()[0]["spec"]["nodeName"] == "a100-0"
    bounded.poll_events()  # a pass
    wait_until(lambda: not any(not p["metadata"].get("deletionTimestamp")
                               for p in kube.gpuq_pods()))


@pytest.mark.parametrize("call", ["stop", "create"])
def test_every_call_is_bounded(kube, bounded, call):
    """Creates, evictions, deletes and lists alike (one default for every call)."""
    if call == "stop":
        bounded.bind(_req())
        wait_until(lambda: bounded.live_job_ids() == {"7"})
        kube.hang(r"^(POST .*/eviction|DELETE |GET /api/v1/services)")
        t, _ = _in_thread(lambda: bounded.stop("7", "preempted", grace_seconds=30))
    else:
        kube.hang(r"^POST /api/v1/namespaces/[^/]+/pods(\?|$)")
        t, _ = _in_thread(lambda: bounded.bind(_req()))
    t.join(HANG_S)
    assert not t.is_alive(), f"{call} still blocked on a hung apiserver"


def test_a_silent_watch_makes_the_cache_stale_until_it_follows_again(kube, bounded):
    """Watches that go silent (connection open, no event, no bookmark) are dropped
    after the idle timeout; once no informer made progress for informer_stale_s the
    cluster refuses to hand a pass its nodes, and says why. It recovers by itself."""
    assert bounded.health() == []
    kube.hang(r"^GET /api/v1/(nodes|pods)")
    wait_until(lambda: bounded.health(), timeout_s=HANG_S)
    assert any("no list, event or bookmark" in p for p in bounded.health())
    with pytest.raises(StaleCache):
        bounded.list_nodes()
    kube.unhang()
    wait_until(lambda: bounded.health() == [], timeout_s=HANG_S)
    assert [n.name for n in bounded.list_nodes()] == ["a100-0"]


def test_failed_list_rounds_back_off_exponentially(kube):
    """A list the apiserver never answers: each round fails after the timeout, and the
    next waits longer (client-go reflector's backoff), not a constant second."""
    c = make_cluster(kube, request_timeout_s=0.2)
    for inf in c.informers:
        inf.backoff = Backoff(initial_s=0.01, cap_s=0.05)
    kube.hang(r"^GET /api/v1/nodes")
    try:
        c.nodes.start()
        wait_until(lambda: c.nodes.backoff.failures >= 3, timeout_s=HANG_S)
        assert c.nodes.backoff.base(3) > c.nodes.backoff.base(1)
        kube.unhang()  # the apiserver answers again: the informer lists, the backoff resets
        wait_until(lambda: c.nodes.synced.is_set() and c.nodes.backoff.failures == 0,
                   timeout_s=HANG_S)
    finally:
        kube.unhang()
        c.close()


class _Wedged(Step):
    """A step stuck in a call that never returns (as a call without a timeout was)."""

    name = "wedged"

    def __init__(self) -> None:
        super().__init__(interval=0.0)
        self.release = threading.Event()

    def run_once(self) -> None:
        self.release.wait(HANG_S)


def test_a_pass_that_overruns_steps_down_and_ends_the_process(db_url, sf):
    """The watchdog sees the pass beyond GPUQ_PASS_DEADLINE: the leader lock is released
    first (a standby leads at once), /healthz's facts say why, then the process ends."""
    lock = "gpuq-watchdog-test"
    ended = threading.Event()
    d = Dispatcher(sf, SimulatedCluster([]), elector=elector(db_url, lock), interval=0.05,
                   pass_deadline_s=0.5, on_overrun=ended.set)
    wedged = d.add_step(_Wedged())
    t = threading.Thread(target=d.start, daemon=True)
    t.start()
    try:
        assert ended.wait(HANG_S), "the watchdog did not end the process"
        assert d.health(0.5) and "pass running" in d.health(0.5)[0]
        standby = elector(db_url, lock)
        assert standby.ensure(), "the overrunning leader did not step down"
        standby.release()
    finally:
        d.stop()
        wedged.release.set()
        t.join(10)

"""The drainer (a step of the dispatcher's decision thread, beside the lease reaper):
stops and requeues the jobs running on nodes an operator drains.

``POST /v1/nodes/{name}/drain`` (``gpuq nodes drain``) only records the drain
(app/store/cordon.py); the API process never stops Pods itself. This step, which
runs in the one thread that decides, turns every job with a replica on a draining
node into a stop through the same path as a preemption (``Dispatcher.run_with``):
the job goes back to the queue with its submit time, its Pods get the preemption
grace period, and its event says which node was drained and why. Whole jobs only:
a gang with one replica there stops whole, as a preempted gang does. Nothing is
exempt (a drain is the operator's decision, as ``kubectl drain`` is), P0 included.
"""

from __future__ import annotations

from app.dispatch.dispatcher import Dispatcher
from app.dispatch.loops import Step
from app.scheduling.model import CycleResult, Preemption, Snapshot
from app.scheduling.verdicts import Reason, ReasonCode
from app.store.cordon import draining_nodes


def drain_decision(draining: set[str]):
    """The decision that stops every running job holding anything on ``draining``."""

    def decide(snap: Snapshot) -> CycleResult:
        out = []
        for r in snap.running:
            nodes = sorted({p.node for p in r.placements} & draining)
            if nodes:
                why = Reason(ReasonCode.OTHER,
                             f"stopped and requeued: node {', '.join(nodes)} is being drained",
                             {"nodes": tuple(nodes)})
                out.append(Preemption(r.request.id, why))
        return CycleResult(preemptions=out)

    return decide


class Drainer(Step):
    name = "drainer"

    def __init__(self, dispatcher: Dispatcher, interval: float = 5.0) -> None:
        super().__init__(interval)
        self.dispatcher = dispatcher

    def run_once(self) -> None:
        with self.dispatcher.session_factory() as session:
            draining = draining_nodes(session)
        if not draining:
            return
        result = self.dispatcher.run_with(drain_decision(draining))
        if result is not None and result.preemptions:
            self.log.info("drained %d job(s) off %s", len(result.preemptions),
                          ", ".join(sorted(draining)))

"""The nodes whose kubelet refused a job's Pod at admission, remembered a while.

A kubelet admits every Pod bound to it (pkg/kubelet/lifecycle/predicate.go) and may
refuse one gpuq bound: out of a device after a race with another scheduler or the
device plugin (``OutOfnvidia.com/gpu``, ``UnexpectedAdmissionError``), affinity that
changed (``NodeAffinity``). The Pod is then Failed from the start; gpuq requeues the job
without spending its retries (app/cluster/k8s_pods.py), and it must not go straight
back to the same node, where the same refusal waits. kube-scheduler's answer is the same
in spirit: a Pod that failed there is retried after a back-off, and its cache (fed by the
kubelet's view) no longer offers the node.

Bounded: ``per_job`` nodes per job (the oldest forgotten first) and ``max_jobs`` jobs
(the least recently refused forgotten first), each node for ``ttl_s`` seconds, after
which the node is worth a try again (the race was lost, not the node).
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable


class RejectedNodes:
    def __init__(self, ttl_s: float = 300.0, per_job: int = 8, max_jobs: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.ttl_s = ttl_s
        self.per_job = per_job
        self.max_jobs = max_jobs
        self.clock = clock
        self._by_job: OrderedDict[str, OrderedDict[str, float]] = OrderedDict()

    def add(self, job_id: str, node: str) -> None:
        """The kubelet of ``node`` refused ``job_id``'s Pod now."""
        nodes = self._by_job.pop(job_id, None) or OrderedDict()
        nodes.pop(node, None)
        nodes[node] = self.clock() + self.ttl_s
        while len(nodes) > self.per_job:
            nodes.popitem(last=False)
        self._by_job[job_id] = nodes
        while len(self._by_job) > self.max_jobs:
            self._by_job.popitem(last=False)

    def current(self) -> dict[str, frozenset[str]]:
        """Job id -> the nodes it avoids now (expired entries are dropped)."""
        now = self.clock()
        out: dict[str, frozenset[str]] = {}
        for job_id in list(self._by_job):
            nodes = self._by_job[job_id]
            for node in [n for n, until in nodes.items() if until <= now]:
                del nodes[node]
            if nodes:
                out[job_id] = frozenset(nodes)
            else:
                del self._by_job[job_id]
        return out

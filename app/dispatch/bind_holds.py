"""Jobs held out of the plan after a bind the cluster refused for a passing reason.

A refusal that passes with time (an exceeded ResourceQuota, gpuq's own RBAC, a
throttled or failing apiserver, a call with no answer: app/cluster/k8s_refusals.py)
puts the job back in the queue. Planned again at once, it would be admitted, its
Pods created and deleted again every pass for as long as the refusal lasts. Instead
it sits out an exponential backoff with jitter (app/domain/backoff.py: 5 s doubling
to 5 min), as the Job controller backs off a failing Pod (pkg/controller/job/
backoff_utils.go) and kube-scheduler a Pod that failed to schedule (pkg/scheduler/
backend/queue/scheduling_queue.go, podInitialBackoff 1 s to podMaxBackoff 10 s).
A bind that succeeds clears the job's count.

Kept in the leader's memory: a new leader tries each held job once more, then holds
it again. The pure core is not told: the job is left out of the cycle's snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from app.domain.backoff import Backoff


@dataclass
class BindHolds:
    initial_s: float = 5.0
    cap_s: float = 300.0
    clock: Callable[[], float] = time.monotonic  # tests move it
    _until: dict[str, float] = field(default_factory=dict)
    _backoff: dict[str, Backoff] = field(default_factory=dict)

    def hold(self, job_id: str, now: float | None = None) -> float:
        """The job's bind was refused again: hold it; returns the seconds held."""
        now = self.clock() if now is None else now
        b = self._backoff.setdefault(job_id, Backoff(self.initial_s, self.cap_s))
        delay = b.next()
        self._until[job_id] = now + delay
        return delay

    def clear(self, job_id: str) -> None:
        """Bound: the next refusal starts from the initial delay again."""
        self._until.pop(job_id, None)
        self._backoff.pop(job_id, None)

    def held(self, now: float | None = None) -> set[str]:
        """Jobs to leave out of this cycle. Entries long past (the job was cancelled or
        bound by another leader) are forgotten, so the map does not grow for ever."""
        now = self.clock() if now is None else now
        for job_id, until in list(self._until.items()):
            if now - until > 4 * self.cap_s:
                self.clear(job_id)
        return {j for j, until in self._until.items() if now < until}

    def failures(self, job_id: str) -> int:
        b = self._backoff.get(job_id)
        return b.failures if b is not None else 0

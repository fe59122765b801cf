"""A tiny controllable-clock driver for the pure core (test helper).

It applies CycleResults the way the dispatcher does: admissions become
running jobs (LeaseGrants become LeaseInfos), preemptions requeue the job
with its original submit time, preemption_count + 1 and who preempted it,
and jobs finish after their ``runtime``. Every step is recorded as an event
so tests can check whole scenarios.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from app.scheduling.engine import schedule
from app.scheduling.model import (
    Device,
    GpuType,
    JobRequest,
    LeaseInfo,
    Node,
    PoolInfo,
    PriorityInfo,
    RunningJob,
    SchedulerConfig,
    Snapshot,
    TeamInfo,
)

TYPES = {
    "a100": GpuType("a100", 80, 10),
    "v100": GpuType("v100", 16, 4),
}
PRIO = {
    "P0": PriorityInfo("P0", 1000, False),
    "P1": PriorityInfo("P1", 500, True),
    "P2": PriorityInfo("P2", 100, True),
}


def node(name: str, t: str | None, gpus: int, cpu: float = 64, mem: float = 512) -> Node:
    return Node(name, t, [Device(i) for i in range(gpus)], cpu=cpu, memory_gb=mem)


def job(id: str, pool: str = "p", prio: str = "P1", team: str | None = None, **kw) -> JobRequest:
    pi = PRIO[prio]
    base = dict(
        name=id, team=team or pool, pool=pool, priority=pi.name, priority_value=pi.value,
        preemptible=pi.preemptible, submitted_at=0.0, gpus=1, cpu=1, memory_gb=1,
    )
    base.update(kw)
    return JobRequest(id=id, **base)


def running(req: JobRequest, node_name: str, t: str, devices: tuple[int, ...],
            started_at: float = 0.0, leases: tuple[LeaseInfo, ...] = ()) -> RunningJob:
    from app.scheduling.model import ReplicaPlacement

    w = TYPES[t].weight
    p = ReplicaPlacement(0, node_name, t, devices, units=w * len(devices), cpu=req.cpu,
                         memory_gb=req.memory_gb)
    return RunningJob(req, (p,), started_at, leases)


def snapshot(nodes, pools, pending=(), run=(), now=0.0, teams=None, types=None,
             priorities=None, **cfg) -> Snapshot:
    pools_map = {p.name: p for p in pools}
    teams = teams or {p.name: TeamInfo(p.name, p.name) for p in pools}
    return Snapshot(
        now=now, gpu_types=types or TYPES, nodes=list(nodes), pools=pools_map, teams=teams,
        priorities=priorities or PRIO, running=list(run), pending=list(pending),
        config=SchedulerConfig(**cfg),
    )


@dataclass
class Sim:
    nodes: list[Node]
    pools: list[PoolInfo]
    config: dict = field(default_factory=dict)
    now: float = 0.0
    pending: dict[str, JobRequest] = field(default_factory=dict)
    running: dict[str, RunningJob] = field(default_factory=dict)
    runtime: dict[str, float] = field(default_factory=dict)
    done: dict[str, str] = field(default_factory=dict)  # job -> terminal state
    events: list[tuple[float, str, str, dict]] = field(default_factory=list)
    lease_seq: int = 0
    policy: object = schedule
    types: dict | None = None
    teams: dict | None = None
    last_snap: Snapshot | None = None

    def submit(self, req: JobRequest, runtime: float = 1e9) -> None:
        req = replace(req, submitted_at=self.now)
        self.pending[req.id] = req
        self.runtime[req.id] = runtime

    def submit_due(self, jobs: list[dict], step: int) -> set[str]:
        """Submit the drawn jobs (``at``, ``req``, ``runtime``) due at ``step``; their ids."""
        due = [j for j in jobs if j["at"] == step]
        for j in due:
            self.submit(j["req"], runtime=j["runtime"])
        return {j["req"].id for j in due}

    def snap(self) -> Snapshot:
        return snapshot(self.nodes, self.pools, self.pending.values(), self.running.values(),
                        now=self.now, teams=self.teams, types=self.types, **self.config)

    def cycle(self):
        self.last_snap = self.snap()
        res = self.policy(self.last_snap)
        for ret in res.returned:  # the lease ends, the job keeps running
            r = self.running[ret.job_id]
            self.running[ret.job_id] = replace(
                r, leases=tuple(x for x in r.leases if x.id != ret.lease_id))
            self.events.append((self.now, "lease_returned", ret.job_id,
                                {"lease": ret.lease_id, "reason": ret.reason}))
        for pr in res.preemptions:
            r = self.running.pop(pr.job_id)
            for x in r.leases:
                self.events.append((self.now, "lease_end", pr.job_id, {"lease": x.id}))
            self.events.append((self.now, pr.kind, pr.job_id, {"by": pr.by_job,
                                                               "reason": pr.reason}))
            self.pending[pr.job_id] = replace(
                r.request, preemption_count=r.request.preemption_count + 1,
                last_preempted_at=self.now, last_preempted_by=pr.by_job,
                last_reclaimed_at=self.now if pr.kind == "reclaim" else
                r.request.last_reclaimed_at,
                longest_attempt_s=max(r.request.longest_attempt_s or 0.0,
                                      self.now - r.started_at))
        for a in res.admissions:
            req = self.pending.pop(a.job_id)
            leases = []
            for g in a.leases:
                self.lease_seq += 1
                lid = f"L{self.lease_seq}"
                leases.append(LeaseInfo(lid, g.borrower, g.lender, g.gpu_type, g.units,
                                        a.job_id, self.now, g.expires_at))
                self.events.append((self.now, "lease_start", a.job_id,
                                    {"lease": lid, "lender": g.lender, "expires": g.expires_at}))
            self.running[a.job_id] = RunningJob(req, a.placements, self.now, tuple(leases))
            self.events.append((self.now, "admit", a.job_id, {"notes": a.notes}))
        return res

    def advance(self, dt: float) -> None:
        """Move the clock, finishing jobs whose run is over (then one cycle)."""
        self.now += dt
        for jid, r in list(self.running.items()):
            if self.now + 1e-9 >= r.started_at + self.runtime[jid]:
                del self.running[jid]
                for x in r.leases:
                    self.events.append((self.now, "lease_end", jid, {"lease": x.id}))
                self.done[jid] = "succeeded"
                self.events.append((self.now, "finish", jid, {}))

    def kinds(self, job_id: str) -> list[str]:
        return [e[1] for e in self.events if e[2] == job_id]

"""gpuq on the fill protocol: the live core's ``place_job``, nothing of the harness's own."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from app.scheduling.context import PlacementContext
from app.scheduling.fragmentation import MixEntry, WorkloadMix, with_gpuq_terms
from app.scheduling.model import Device, GpuType, JobRequest, Node, SchedulerConfig
from app.scheduling.placement import place_job
from app.scheduling.state import ClusterState
from app.simulate.alibaba import GPU_MODELS, MIB_TO_GB, TraceNode, TracePod
from app.simulate.fill_state import MILLI, Choice, FillCluster, FillPod


class CorePolicy:
    """The live core's ``place_job`` on a persistent ClusterState (the dispatcher's code path).

    Pods become JobRequests (gpu_milli -> gpu_share, gpu_spec -> gpu_types),
    nodes core Nodes of the default GPU types; the context's workload mix is
    the trace's pod shapes weighted by count (what the live core derives
    from its pending queue), passed through ``with_gpuq_terms`` with the
    config's ``w_balance``/``w_type_pressure`` as ``PlacementContext.from_snapshot``
    does; every score weight comes from ``scheduler:`` as in a live config.
    """

    name = "gpuq"

    def __init__(
        self,
        nodes: list[TraceNode],
        pods: list[TracePod],
        scheduler: Mapping[str, Any] | None = None,
        **_: Any,
    ) -> None:
        self._mib = MIB_TO_GB
        self.types = {
            m.type_name: GpuType(m.type_name, m.memory_gb, m.weight, shareable=True)
            for m in GPU_MODELS.values()
        }
        self.type_of = {code: m.type_name for code, m in GPU_MODELS.items()}
        core_nodes = [
            Node(
                name=n.name,
                gpu_type=self.type_of[n.model],
                devices=[Device(index=g) for g in range(n.gpus)],
                cpu=n.cpu_milli / MILLI,
                memory_gb=n.memory_mib * MIB_TO_GB,
            )
            for n in nodes
        ]
        self.state = ClusterState(core_nodes, self.types)
        counts: dict[tuple, int] = {}
        for p in pods:
            key = (p.num_gpu, p.gpu_milli, p.cpu_milli, p.memory_mib, p.gpu_spec)
            counts[key] = counts.get(key, 0) + 1
        config = SchedulerConfig.from_mapping(scheduler)
        entries = tuple(
            MixEntry(
                gpus=num if milli >= MILLI else 0,
                gpu_share=milli / MILLI if 0 < milli < MILLI else 0.0,
                cpu=cpu / MILLI,
                memory_gb=mem * MIB_TO_GB,
                gpu_types=tuple(self.type_of[s] for s in spec if s in self.type_of),
                weight=float(w),
            )
            for (num, milli, cpu, mem, spec), w in counts.items()
        )
        cards: dict[str, float] = {}
        for n in core_nodes:
            cards[n.gpu_type or ""] = cards.get(n.gpu_type or "", 0.0) + len(n.devices)
        mix = with_gpuq_terms(
            WorkloadMix(entries), cards, w_balance=config.w_balance, w_type=config.w_type_pressure
        )
        self.ctx = PlacementContext(gpu_types=self.types, config=config, mix=mix)
        self.node_index = {n.name: i for i, n in enumerate(nodes)}
        self._n = 0

    def job_of(self, pod: FillPod) -> JobRequest:
        """The pod as the JobRequest the dispatcher would hand the core."""
        self._n += 1
        share = pod.num == 1 and pod.milli < MILLI
        return JobRequest(
            id=f"{pod.name}",
            name=pod.name,
            team="openb",
            pool="default",
            priority="P1",
            priority_value=500,
            preemptible=True,
            submitted_at=float(self._n),
            gpus=None if share else pod.num,
            gpu_share=pod.milli / MILLI if share else None,
            gpu_types=tuple(self.type_of[s] for s in pod.spec) if pod.spec else (),
            cpu=pod.cpu / MILLI,
            memory_gb=pod.mem * self._mib,
        )

    def choose(self, pod: FillPod, cl: FillCluster) -> Choice:
        placed = place_job(self.job_of(pod), self.state, self.ctx)
        if not placed:
            return None
        (p,) = placed
        self.state.apply(p)
        return self.node_index[p.node], list(p.devices)

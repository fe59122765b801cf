"""Jobs without GPUs run on CPU-only nodes unless the config lets them use GPU nodes.

Before, a job of ``gpus: 0, cpu: 0, memory_gb: 0`` was placed on a GPU node at 0 CU:
a container the device plugin gave no card still sees every card of the node when the
node's default runtime is nvidia and the image sets ``NVIDIA_VISIBLE_DEVICES=all``.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from app.scheduling.engine import schedule
from app.scheduling.model import SchedulerConfig
from app.scheduling.verdicts import ReasonCode
from tests.unit.core_fixtures import job, node, snap

ON_GPU = SchedulerConfig(cpu_jobs_on_gpu_nodes=True)


def placed_on(res, job_id: str) -> set[str]:
    return {p.node for a in res.admissions if a.job_id == job_id for p in a.placements}


def test_a_job_without_gpus_goes_to_a_cpu_node():
    nodes = [node("gpu", "a100-80g", 8), node("cpu", None, 0, cpu=16, mem=64)]
    res = schedule(snap(nodes, [job("c", gpus=0, cpu=2, memory_gb=4)]))
    assert placed_on(res, "c") == {"cpu"}


def test_without_cpu_nodes_it_never_fits_and_says_how_to_allow_it():
    res = schedule(snap([node("gpu", "a100-80g", 8)], [job("c", gpus=0, cpu=0, memory_gb=0)]))
    assert not res.admissions
    why = res.unschedulable["c"]
    assert why.code == ReasonCode.NEVER_FITS and "cpu_jobs_on_gpu_nodes" in why.message
    res = schedule(snap([node("gpu", "a100-80g", 8)], [job("c", gpus=0, cpu=0, memory_gb=0)],
                        config=ON_GPU))
    assert placed_on(res, "c") == {"gpu"}


def test_a_full_cpu_node_is_waited_for_not_replaced_by_a_gpu_node():
    nodes = [node("gpu", "a100-80g", 8), node("cpu", None, 0, cpu=4, mem=64)]
    res = schedule(snap(nodes, [job("a", gpus=0, cpu=4), job("b", gpus=0, cpu=4)]))
    assert placed_on(res, "a") | placed_on(res, "b") == {"cpu"}
    assert len(res.admissions) == 1 and not res.unschedulable  # the other one waits
    # a CPU node too small for the job: never fits, with the largest CPU node named
    res = schedule(snap(nodes, [job("big", gpus=0, cpu=8)]))
    assert "no CPU-only node has 8 CPU" in res.unschedulable["big"].message


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 8), st.integers(1, 64)),
                min_size=1, max_size=6),
       st.lists(st.tuples(st.integers(0, 2), st.integers(0, 16)), min_size=1, max_size=8),
       st.booleans())
def test_no_job_without_gpus_lands_on_a_gpu_node_unless_allowed(cluster, jobs, allowed):
    nodes = [node(f"n{i}", "a100-80g" if gpu and k else None, k if gpu else 0, cpu=cpu)
             for i, (gpu, k, cpu) in enumerate(cluster)]
    gpu_nodes = {n.name for n in nodes if n.gpu_type is not None}
    pending = [job(f"j{i}", gpus=g, cpu=c) for i, (g, c) in enumerate(jobs)]
    res = schedule(snap(nodes, pending, config=SchedulerConfig(cpu_jobs_on_gpu_nodes=allowed)))
    for a in res.admissions:
        if next(j for j in pending if j.id == a.job_id).gpus == 0 and not allowed:
            assert not {p.node for p in a.placements} & gpu_nodes

"""MIG under the single strategy end to end: GPU Feature Discovery's labels
(`nvidia.com/mig.strategy=single`, product `<model>-MIG-<profile>`), one slice per
allocatable `nvidia.com/gpu`; a `mig:` job's Pod asks `nvidia.com/gpu: 1` (what the device
plugin advertises there), and the kubelet admits it (fake API server + PostgreSQL)."""

from __future__ import annotations

from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.domain.spec import JobSpec
from app.store.jobs import submit_job
from tests.fakekube.fixtures import started_cluster
from tests.fakekube.objects import node

CONFIG = """
gpu_types:
  - name: a100-80g
    memory_gb: 80
    weight: 10
    product: "NVIDIA-A100.*80GB"
    mig_profiles:
      "3g.40gb": {memory_gb: 40, compute_fraction: 0.4286}
pools:
  - {name: training, gpu_types: [a100-80g]}
teams:
  - {name: nlp, pool: training, quota_units: 1000}
"""


def test_a_mig_job_on_a_single_strategy_node(kube, sf):
    kube.add_node(node("mig-0", {"nvidia.com/mig.strategy": "single",
                                 "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB-MIG-3g.40gb",
                                 "nvidia.com/gpu.memory": "40192", "nvidia.com/gpu.count": "4"},
                       {"nvidia.com/gpu": "4"}))
    c = started_cluster(kube, sf)
    try:
        d = Dispatcher(sf, c)
        d.run_once()
        with sf() as s:
            for i in range(5):  # four slices: the fifth waits
                submit_job(s, JobSpec.model_validate({
                    "name": f"m{i}", "team": "nlp", "resources": {"mig": "3g.40gb"}}),
                    now=utcnow())
            s.commit()
        for _ in range(2):
            d.run_once()
        pods = kube.gpuq_pods()
        assert len(pods) == 4
        for p in pods:
            assert p["spec"]["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": "1"}
        assert kube.rejected == []
    finally:
        c.close()

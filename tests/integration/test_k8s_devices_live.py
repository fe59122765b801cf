"""The device layer of real nodes end to end: the node sync writes each node's mode, GET
/v1/nodes shows it, a time-sliced node's replicas are not offered as cards, and a
fraction of a card is refused at submit on Kubernetes with what the cluster lacks
(fake API server + real PostgreSQL)."""

from __future__ import annotations

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import select

from app.api.routes.nodes import _view
from app.clock import utcnow
from app.dispatch.dispatcher import Dispatcher
from app.domain.errors import InputError
from app.domain.spec import JobSpec
from app.store.jobs import submit_job
from app.store.orm import NodeRow
from tests.fakekube.fixtures import started_cluster
from tests.fakekube.objects import node

CONFIG = """
gpu_types:
  - {name: rtx4090-24g, memory_gb: 24, weight: 2, product: "GeForce-RTX-4090", shareable: true}
pools:
  - {name: inference, gpu_types: [rtx4090-24g], guaranteed: {rtx4090-24g: 8}}
teams:
  - {name: recsys, pool: inference, quota_units: 100}
"""
RTX = "NVIDIA-GeForce-RTX-4090"


def test_sharing_modes_synced_shown_and_shares_refused(kube, sf):
    kube.add_node(node("rtx-0", {"nvidia.com/gpu.product": RTX, "nvidia.com/gpu.count": "4",
                                 "nvidia.com/gpu.replicas": "1",
                                 "nvidia.com/gpu.sharing-strategy": "none"},
                       {"nvidia.com/gpu": "4"}))
    kube.add_node(node("rtx-ts", {"nvidia.com/gpu.product": RTX + "-SHARED",
                                  "nvidia.com/gpu.count": "4", "nvidia.com/gpu.replicas": "4",
                                  "nvidia.com/gpu.sharing-strategy": "time-slicing"},
                       {"nvidia.com/gpu": "16"}))
    c = started_cluster(kube, sf)
    try:
        Dispatcher(sf, c).run_once()
        with sf() as s:
            rows = {r.name: r for r in s.scalars(select(NodeRow))}
            shown = {n: _view(r, {}) for n, r in rows.items()}
        assert rows["rtx-0"].gpus == 4 and rows["rtx-0"].gpu_type == "rtx4090-24g"
        assert shown["rtx-0"]["sharing"] == {"mode": "exclusive", "offered": True,
                                             "device_choice": "node", "cards": 4}
        # 16 replicas of 4 cards used to be offered as 16 whole cards
        assert rows["rtx-ts"].gpus == 0
        ts = shown["rtx-ts"]["sharing"]
        assert (ts["mode"], ts["offered"], ts["replicas"], ts["cards"]) == (
            "time-slicing", False, 4, 4)
        assert "not offer" in ts["detail"]
        # the operator sees why: a Warning on the Node and a gauge by mode
        events = [e for e in kube.k8s_events if e["reason"] == "GpuqUnsupportedGpuSharing"]
        assert [e["involvedObject"]["name"] for e in events] == ["rtx-ts"]
        assert REGISTRY.get_sample_value("gpuq_k8s_unoffered_gpu_nodes",
                                         {"mode": "time-slicing"}) == 1

        with sf() as s:
            share = JobSpec.model_validate({"name": "emb", "team": "recsys", "resources": {
                "gpu_share": 0.25, "gpu_types": ["rtx4090-24g"]}})
            with pytest.raises(InputError, match="gpu_share is not available on this cluster"):
                submit_job(s, share, now=utcnow())
            whole = JobSpec.model_validate({"name": "emb", "team": "recsys", "resources": {
                "gpus": 1, "gpu_types": ["rtx4090-24g"]}})
            assert submit_job(s, whole, now=utcnow()).job.id
            s.commit()
    finally:
        c.close()

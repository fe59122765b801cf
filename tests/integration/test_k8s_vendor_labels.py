"""Another vendor's GPU types, recognised by the node labels the config names for them
(product_label, memory_label), from the config file through the database to the node
sync (fake API server + real PostgreSQL)."""

from __future__ import annotations

from sqlalchemy import select

from app.dispatch.dispatcher import Dispatcher
from app.store.orm import GpuTypeRow, NodeRow
from tests.fakekube.fixtures import started_cluster
from tests.fakekube.objects import node

CONFIG = """
gpu_types:
  - {name: mi300x, vendor: amd, memory_gb: 192, weight: 14, resource_name: amd.com/gpu,
     product: "MI300X", product_label: amd.com/gpu.product-name,
     memory_label: amd.com/gpu.vram}
  - {name: mi250, vendor: amd, memory_gb: 64, weight: 8, resource_name: amd.com/gpu,
     product: "MI250", product_label: amd.com/gpu.product-name,
     memory_label: amd.com/gpu.vram}
pools:
  - {name: training, gpu_types: [mi300x, mi250]}
teams:
  - {name: nlp, pool: training, quota_units: 1000}
"""


def test_amd_types_told_apart_by_their_product_label(kube, sf):
    with sf() as s:
        row = s.get(GpuTypeRow, "mi300x")
        assert (row.product_label, row.memory_label) == ("amd.com/gpu.product-name",
                                                         "amd.com/gpu.vram")
    kube.add_node(node("mi300-0", {"amd.com/gpu.product-name": "AMD_Instinct_MI300X",
                                   "amd.com/gpu.vram": "192G"}, {"amd.com/gpu": "8"}))
    kube.add_node(node("mi250-0", {"amd.com/gpu.product-name": "AMD_Instinct_MI250X",
                                   "amd.com/gpu.vram": "64G"}, {"amd.com/gpu": "4"}))
    c = started_cluster(kube, sf)
    try:
        Dispatcher(sf, c).run_once()
        with sf() as s:
            rows = {r.name: r for r in s.scalars(select(NodeRow))}
        assert (rows["mi300-0"].gpu_type, rows["mi300-0"].gpus) == ("mi300x", 8)
        assert (rows["mi250-0"].gpu_type, rows["mi250-0"].gpus) == ("mi250", 4)
    finally:
        c.close()

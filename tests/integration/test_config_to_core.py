"""One conversion of a catalog to the core's types: a config file read directly
(app/domain/from_config.py: ``gpuq simulate``, the simulated cluster) and the same
file applied to the database and read back as rows (app/store/convert.py: the
dispatcher's snapshot) give equal GPU types, nodes, pools and teams."""

from __future__ import annotations

from sqlalchemy import select

from app.domain.config import load_config_text
from app.domain.from_config import cluster_model
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.convert import gpu_type_info, node_info, pool_info, team_info
from app.store.orm import GpuTypeRow, NodeRow, PoolRow, TeamRow

# every field a conversion reads, with the forms a config file allows: MIG profiles,
# a MIG layout as a list (card 0) and as {card: [profiles]}, a CPU-only node, a node
# defined unschedulable, labels and taints, another vendor's resource, count: N
CONFIG = """
gpu_types:
  - name: a100-80g
    memory_gb: 80
    weight: 10
    speed: 1.5
    mig_profiles:
      1g.10gb: {memory_gb: 10, compute_fraction: 0.142857}
      3g.40gb: {memory_gb: 40, compute_fraction: 0.428571}
  - {name: rtx4090-24g, memory_gb: 24, weight: 2, shareable: true}
  - {name: mi300x, memory_gb: 192, weight: 12, vendor: amd, resource_name: amd.com/gpu}
nodes:
  - name: a100
    count: 2
    gpu_type: a100-80g
    gpus: 4
    cpu: 96
    memory_gb: 1024
    rack: r1
    network: ib
    nvlink_domain: nv1
    mig_layout: {1: [3g.40gb, 3g.40gb], 2: [1g.10gb, 1g.10gb, 1g.10gb]}
    labels: {zone: a, tier: fast}
    taints: [{key: gpu, value: "yes", effect: NoSchedule}, {key: spot}]
  - {name: mig0, gpu_type: a100-80g, gpus: 1, mig_layout: [3g.40gb, 1g.10gb]}
  - {name: rtx, gpu_type: rtx4090-24g, gpus: 2, schedulable: false}
  - {name: amd, gpu_type: mi300x, gpus: 8, rack: r2}
  - {name: cpu, cpu: 32, memory_gb: 128}
pools:
  - name: training
    gpu_types: [a100-80g, mi300x]
    guaranteed: {a100-80g: 40}
    borrow_limit: 20
    lend_limit: {a100-80g: 10}
    max_borrow_seconds: 600
    reclaim: always
  - {name: shared, placement: spread, weight: 2}
teams:
  - {name: nlp, pool: training, allowed_pools: [shared], quota_units: 80,
     quota_by_type: {a100-80g: 40}, weight: 3}
  - {name: vision, pool: shared}
"""


def test_a_config_and_its_rows_become_the_same_core_objects(session_factory):
    cfg = load_config_text(CONFIG)
    model = cluster_model(cfg)
    with session_factory() as s:
        ensure_priority_classes(s)
        apply_config(s, cfg)
        s.commit()
        types = {r.name: gpu_type_info(r) for r in s.scalars(select(GpuTypeRow))}
        nodes = {r.name: node_info(r) for r in s.scalars(select(NodeRow))}
        pools = {r.name: pool_info(r) for r in s.scalars(select(PoolRow))}
        teams = {r.name: team_info(r) for r in s.scalars(select(TeamRow))}

    assert types == model.gpu_types
    assert nodes == {n.name: n for n in model.nodes}
    assert {p: pools[p] for p in model.pools} == model.pools
    assert {t: teams[t] for t in model.teams} == model.teams
    # the case is not trivially equal: the MIG layouts, profiles and taints came through
    assert [d.mig_layout for d in nodes["a100-0"].devices] == [
        (), ("3g.40gb", "3g.40gb"), ("1g.10gb",) * 3, ()]
    assert nodes["mig0"].devices[0].mig_layout == ("3g.40gb", "1g.10gb")
    assert nodes["a100-1"].taints == (("gpu", "yes", "NoSchedule"), ("spot", "", "NoSchedule"))
    assert types["a100-80g"].mig_profiles["3g.40gb"].memory_gb == 40
    assert not nodes["rtx"].schedulable and nodes["cpu"].gpu_type is None


def test_a_cordoned_row_is_out_of_service_whatever_its_definition(session_factory):
    cfg = load_config_text(CONFIG)
    with session_factory() as s:
        ensure_priority_classes(s)
        apply_config(s, cfg)
        row = s.get(NodeRow, "amd")
        assert row is not None and node_info(row).schedulable
        row.cordon = {"by": "admin", "reason": "maintenance"}
        assert not node_info(row).schedulable

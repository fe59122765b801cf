"""The FGD-style fragmentation measure: hand-checked values, a brute-force reference, deltas."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.scheduling.fragmentation import (
    FragModel,
    IntTask,
    MixEntry,
    WorkloadMix,
    fragmentation_delta,
    node_fragmentation,
    placement_cost,
    type_pressure,
    with_gpuq_terms,
)
from app.scheduling.model import Device, GpuType, Node, ReplicaPlacement

T4 = GpuType("t4", 16, 1, shareable=True)


def brute(tasks, type_name, free, cpu, mem, use_memory=True):
    """The definition, one task at a time (FGD's NodeGpuShareFragAmount, plus memory)."""
    total_w = sum(t.weight for t in tasks)
    total = sum(free)
    f = 0.0
    for t in tasks:
        p = t.weight / total_w
        ok = (
            t.num > 0
            and (t.types is None or type_name in t.types)
            and cpu >= t.cpu
            and (not use_memory or mem >= t.mem)
            and sum(1 for x in free if x >= t.milli) >= t.num
        )
        f += p * (sum(x for x in free if x < t.milli) if ok else total)
    return f


def test_hand_checked_value():
    # mix: half whole-card tasks, half 500-milli shares
    tasks = [IntTask(1000, 0, 1, 1000, None, 1.0), IntTask(1000, 0, 1, 500, None, 1.0)]
    m = FragModel(tasks)
    # free cards [1000, 300]: whole fits (300 is a fragment), share fits (300 is a fragment)
    assert m.frag("t4", (1000, 300), 4000, 0) == pytest.approx(300)
    # [400, 300]: nothing fits -> all 700 is fragment
    assert m.frag("t4", (400, 300), 4000, 0) == pytest.approx(700)
    # [600, 0]: the share fits (0 fragment for it), the whole card does not (600)
    assert m.frag("t4", (600, 0), 4000, 0) == pytest.approx(300)
    # no CPU left: everything free is a fragment
    assert m.frag("t4", (1000, 1000), 500, 0) == pytest.approx(2000)


task_st = st.builds(
    IntTask,
    cpu=st.integers(0, 16000),
    mem=st.integers(0, 64),
    num=st.integers(0, 4),
    milli=st.sampled_from([100, 250, 500, 810, 1000]),
    types=st.sampled_from([None, frozenset({"t4"}), frozenset({"g2"}), frozenset({"t4", "g2"})]),
    weight=st.floats(0.1, 10),
).map(lambda t: IntTask(t.cpu, t.mem, t.num, 1000 if t.num > 1 else t.milli if t.num else 0,
                        t.types, t.weight))


@settings(max_examples=150, deadline=None)
@given(
    tasks=st.lists(task_st, min_size=1, max_size=12),
    free=st.lists(st.integers(0, 1000), min_size=1, max_size=8),
    cpu=st.integers(0, 20000),
    mem=st.integers(0, 80),
    type_name=st.sampled_from(["t4", "g2"]),
    use_memory=st.booleans(),
)
def test_matches_brute_force(tasks, free, cpu, mem, type_name, use_memory):
    m = FragModel(tasks, use_memory=use_memory)
    key = tuple(sorted(free, reverse=True))
    got = m.frag(type_name, key, cpu, mem)
    assert got == pytest.approx(brute(tasks, type_name, key, cpu, mem, use_memory), abs=1e-6)
    assert m.frag(type_name, key, cpu, mem) == got  # cached value is the same


def _node(shares, cpu_used=0.0):
    devs = [Device(index=i, share_used=s) for i, s in enumerate(shares)]
    return Node("n", "t4", devs, cpu=16, memory_gb=64, cpu_used=cpu_used)


MIX = WorkloadMix((
    MixEntry(gpus=1, gpu_share=0, cpu=2, memory_gb=4, weight=1),
    MixEntry(gpus=0, gpu_share=0.5, cpu=2, memory_gb=4, weight=1),
))


def test_core_interface_values_in_cards():
    assert node_fragmentation(_node([0.0, 0.7]), T4, MIX) == pytest.approx(0.3)
    assert node_fragmentation(_node([0.6, 0.7]), T4, MIX) == pytest.approx(0.7)
    assert node_fragmentation(_node([0.0]), None, MIX) == 0.0


def test_delta_prefers_the_partly_used_card():
    node = _node([0.0, 0.5])
    on_partial = ReplicaPlacement(0, "n", "t4", devices=(1,), share=0.5, cpu=2, memory_gb=4)
    on_fresh = ReplicaPlacement(0, "n", "t4", devices=(0,), share=0.5, cpu=2, memory_gb=4)
    d_partial = fragmentation_delta(node, T4, on_partial, MIX)
    d_fresh = fragmentation_delta(node, T4, on_fresh, MIX)
    assert d_partial < d_fresh
    # delta is after - before, and the node is unchanged
    assert d_partial == pytest.approx(0.0 - node_fragmentation(node, T4, MIX))
    assert node.devices[1].share_used == 0.5


def test_types_memory_and_shareability_are_respected():
    v100 = GpuType("v100", 16, 3, shareable=False)
    mix = WorkloadMix((MixEntry(gpus=0, gpu_share=0.5, cpu=1, memory_gb=1, weight=1),
                       MixEntry(gpus=1, gpu_share=0, cpu=1, memory_gb=1, gpu_types=("t4",),
                                min_gpu_memory_gb=0, weight=1)))
    # on a non-shareable v100 neither kind can run: all free capacity is fragmented
    assert node_fragmentation(Node("n", "v100", [Device(0)], cpu=8, memory_gb=8), v100, mix) == 1
    big = WorkloadMix((MixEntry(gpus=1, gpu_share=0, cpu=1, memory_gb=1, min_gpu_memory_gb=40),))
    assert node_fragmentation(_node([0.0]), T4, big) == 1.0
    fits = WorkloadMix((MixEntry(gpus=1, gpu_share=0, cpu=1, memory_gb=1, min_gpu_memory_gb=8),))
    assert node_fragmentation(_node([0.0]), T4, fits) == 0.0


def test_placement_cost_terms():
    m = FragModel([IntTask(12000, 0, 1, 1000, None, 1.0)])
    before = ((1000, 1000), 24000, 0)
    after = ((1000, 0), 12000, 0)
    base = placement_cost(m, "g2", before, after, 24000, 1000)
    assert base == pytest.approx(m.frag("g2", *after) - m.frag("g2", *before))
    # balanced (half the cards, half the CPU left): no balance charge
    assert placement_cost(m, "g2", before, after, 24000, 1000, w_balance=1.0) == base
    # the pod ate most of the CPU: the free card is stranded -> charged
    hungry = ((1000, 0), 2000, 0)
    bal = placement_cost(m, "g2", before, hungry, 24000, 1000, w_balance=0.1)
    plain = placement_cost(m, "g2", before, hungry, 24000, 1000)
    assert bal == pytest.approx(plain + 0.1 * abs(0.5 - 2000 / 24000) * 1000)
    typed = placement_cost(m, "g2", before, after, 24000, 1000, w_type=2.0, pressure=0.25)
    assert typed == pytest.approx(base + 2.0 * 0.25 * 1000)


def test_type_pressure():
    p = type_pressure([(("t4",), 3.0), (("t4", "v100"), 2.0), (("a100",), 1.0)],
                      {"t4": 4.0, "v100": 2.0, "g2": 8.0})
    assert p == {"t4": pytest.approx(1.0), "v100": pytest.approx(0.5), "g2": 0.0}


def test_core_delta_uses_the_mix_terms():
    node = _node([0.0, 0.0])
    pl = ReplicaPlacement(0, "n", "t4", devices=(0,), cpu=15, memory_gb=4)
    plain = fragmentation_delta(node, T4, pl, MIX)
    weighted = WorkloadMix(MIX.entries, type_pressure=(("t4", 0.5),), w_balance=0.1, w_type=1.0)
    got = fragmentation_delta(node, T4, pl, weighted)
    # 1 of 2 cards free, 1 of 16 CPUs free -> gap 0.4375; type: 0.5 x 1000 milli
    assert got == pytest.approx(plain + (0.1 * 0.4375 * 1000 + 0.5 * 1000) / 1000)


def test_with_gpuq_terms_derives_pressure_from_the_mix():
    mix = WorkloadMix((
        MixEntry(gpus=2, gpu_share=0, cpu=1, memory_gb=1, gpu_types=("t4",), weight=3),
        MixEntry(gpus=0, gpu_share=0.5, cpu=1, memory_gb=1, gpu_types=("t4", "v100"), weight=4),
        MixEntry(gpus=1, gpu_share=0, cpu=1, memory_gb=1, weight=10),  # unrestricted
    ))
    out = with_gpuq_terms(mix, {"t4": 8.0, "v100": 2.0, "g2": 16.0}, w_balance=0.2, w_type=3.0)
    # t4: 3 x 2 cards + 4 x 0.5 / 2 = 7 of 8; v100: 1 of 2; g2: nothing restricted
    assert dict(out.type_pressure) == pytest.approx({"t4": 7 / 8, "v100": 0.5, "g2": 0.0})
    assert out.entries == mix.entries and out.w_balance == 0.2 and out.w_type == 3.0

"""Speed-aware placement (``placement.speed_tiers``): a job goes to its fastest allowed GPU
type that has room (its own speed table, else the operator's ``GpuType.speed``); the score
decides only among types of equal speed, and when every type runs alike."""

from __future__ import annotations

from app.scheduling.engine import schedule
from app.scheduling.model import SchedulerConfig
from app.scheduling.scores import speed_gain
from tests.unit.core_fixtures import job, node, running, snap, whole

SPEED = (("a100-80g", 2.0), ("rtx4090-24g", 1.2), ("v100-16g", 1.0))
NODES = [node("v", "v100-16g", 8), node("a", "a100-80g", 8)]
BUSY = running(job("busy"), whole("v", "v100-16g", (0, 1, 2, 3)))


def _type_of(res, job_id: str) -> str | None:
    (adm,) = [a for a in res.admissions if a.job_id == job_id]
    return adm.placements[0].gpu_type


def test_gain_is_speed_over_best_speed() -> None:
    j = job("j", speed=SPEED)
    assert speed_gain(j, "a100-80g") == 1.0
    assert speed_gain(j, "v100-16g") == 0.5
    assert speed_gain(j, "h100") == 0.5  # a type missing from the table runs at speed 1
    assert speed_gain(job("k"), "a100-80g") == 0.0  # no table: no preference


def test_job_goes_to_the_type_where_it_runs_fastest() -> None:
    # the V100 node is half full (binpack picks it without speeds); the job runs 2x
    # faster on the A100, so it goes there
    res = schedule(snap(NODES, [job("j", speed=SPEED)], running=[BUSY]))
    assert _type_of(res, "j") == "a100-80g"


def test_per_job_tables_send_each_job_where_it_gains_most() -> None:
    # one job is fastest on the 4090, the other on the V100: each gets its own type
    nodes = [node("v", "v100-16g", 1), node("r", "rtx4090-24g", 1)]
    fast_on_rtx = job("r", speed=(("rtx4090-24g", 3.0), ("v100-16g", 1.0)))
    fast_on_v100 = job("v", speed=(("rtx4090-24g", 1.0), ("v100-16g", 3.0)), submitted_at=1)
    # (without speeds the first job takes the V100 and the second the 4090)
    res = schedule(snap(nodes, [fast_on_v100, fast_on_rtx], now=2))
    assert _type_of(res, "r") == "rtx4090-24g"
    assert _type_of(res, "v") == "v100-16g"


def test_a_slightly_faster_type_wins_over_a_fuller_node_of_a_slower_one() -> None:
    # 10 % faster on the A100; the half-full V100 node scores higher on binpack. The
    # fastest type with room decides (with the old w_speed weight of 3 the 0.27 it gave
    # lost to binpack's 0.5 and the job ran on the V100)
    slight = (("a100-80g", 1.1), ("v100-16g", 1.0))
    res = schedule(snap(NODES, [job("j", speed=slight)], running=[BUSY]))
    assert _type_of(res, "j") == "a100-80g"


def test_the_next_fastest_type_when_the_fastest_is_full() -> None:
    full = running(job("full", gpus=8), whole("a", "a100-80g", tuple(range(8))))
    res = schedule(snap(NODES, [job("j", speed=SPEED)], running=[BUSY, full]))
    assert _type_of(res, "j") == "v100-16g"


def test_equal_speeds_leave_the_choice_to_the_score() -> None:
    same = (("a100-80g", 1.0), ("v100-16g", 1.0))
    res = schedule(snap(NODES, [job("j", speed=same)], running=[BUSY]))
    assert _type_of(res, "j") == "v100-16g"  # binpack: the half-full node


def test_w_speed_is_gone() -> None:
    import pytest

    with pytest.raises(TypeError):
        SchedulerConfig(w_speed=0.0)  # type: ignore[call-arg]


def test_the_operators_speed_per_type_applies_to_jobs_without_a_table() -> None:
    # GpuType.speed (config/API): the live gpuq knows it; a job with no table of its own
    # goes where the operator measured the type fastest
    from dataclasses import replace

    from tests.unit.core_fixtures import TYPES
    types = {**TYPES, "a100-80g": replace(TYPES["a100-80g"], speed=2.0)}
    assert speed_gain(job("k"), "a100-80g", types) == 1.0
    assert speed_gain(job("k"), "v100-16g", types) == 0.5
    assert speed_gain(job("k"), "a100-80g", TYPES) == 0.0  # every type alike: no preference
    res = schedule(snap(NODES, [job("j")], running=[BUSY], types=types))
    assert _type_of(res, "j") == "a100-80g"
    # without speeds the half-full V100 node wins (binpack)
    assert _type_of(schedule(snap(NODES, [job("j")], running=[BUSY])), "j") == "v100-16g"


def test_speed_in_the_config_reaches_the_core() -> None:
    from app.domain.config import load_config_text
    from app.domain.from_config import gpu_type_from_config
    cfg = load_config_text(
        "gpu_types: [{name: a100-80g, memory_gb: 80, weight: 10, speed: 2.5}]\n"
        "nodes: []\npools: [{name: p}]\nteams: [{name: t, pool: p}]\n")
    assert gpu_type_from_config(cfg.gpu_types[0]).speed == 2.5

"""Comparative advantage (app/scheduling/type_prices.py): a flexible job leaves the type
that less flexible jobs need and takes its gain where nobody else competes."""

from __future__ import annotations

from app.scheduling.engine import schedule
from app.scheduling.model import PoolInfo, SchedulerConfig
from app.scheduling.type_prices import type_prices
from tests.unit.core_fixtures import TYPES, job, node, running, snap, whole

SPEED = (("a100-80g", 2.0), ("rtx4090-24g", 1.2), ("v100-16g", 1.0))
NODES = [node("a", "a100-80g", 8), node("r", "rtx4090-24g", 8)]
POOLS = {"p": PoolInfo("p", gpu_types=("a100-80g", "rtx4090-24g"))}
A100_ONLY = running(job("held", gpu_types=("a100-80g",), gpus=6),
                    whole("a", "a100-80g", (0, 1, 2, 3, 4, 5)))


def _type_of(res, job_id: str) -> str | None:
    (adm,) = [a for a in res.admissions if a.job_id == job_id]
    return adm.placements[0].gpu_type


def test_price_is_the_share_wanted_by_jobs_with_fewer_alternatives() -> None:
    gang = job("g", gpu_types=("a100-80g",), gpus=8)
    flexible = job("f", speed=SPEED)
    share = job("s", gpu_share=0.5)  # only a shareable type (the 4090) can take it
    prices = type_prices([A100_ONLY.request], [gang, flexible, share], TYPES, POOLS,
                         {"a100-80g": 8.0, "rtx4090-24g": 8.0})
    # 6 running + 8 pending cards wanted by A100-only jobs, over 8 A100 cards
    assert prices.price(flexible, "a100-80g") == (6 + 8) / 8
    assert prices.price(flexible, "rtx4090-24g") == 0.5 / 8
    # the flexible job's own kind of demand never prices a type for it, nor does a job
    # with as many alternatives; a job with one alternative pays nothing
    assert prices.price(gang, "a100-80g") == 0.0
    assert prices.advantage(flexible, "a100-80g", 1.0) == 0.0  # price >= 1: no gain left
    assert prices.advantage(flexible, "rtx4090-24g", 0.6) == 0.6 * (1 - 0.5 / 8)


def test_flexible_job_leaves_the_contested_type_to_the_jobs_that_need_it() -> None:
    waiting_gang = job("g", gpu_types=("a100-80g",), gpus=8, submitted_at=0.0)
    flexible = job("f", speed=SPEED, submitted_at=1.0)
    s = snap(NODES, [waiting_gang, flexible], running=[A100_ONLY], pools=POOLS, now=2.0)
    assert _type_of(schedule(s), "f") == "rtx4090-24g"
    # plain speed-aware placement takes the A100 (the gang's last free cards)
    s.config = SchedulerConfig(comparative_advantage=False)
    assert _type_of(schedule(s), "f") == "a100-80g"


def test_uncontested_fast_type_keeps_its_full_gain() -> None:
    flexible = job("f", speed=SPEED)
    res = schedule(snap(NODES, [flexible], pools=POOLS, now=1.0))
    assert _type_of(res, "f") == "a100-80g"

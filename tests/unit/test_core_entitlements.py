"""Entitlements (weighted max-min over effective throughput, then most throughput) and the
time-integrated deficit (app/scheduling/entitlements.py, app/scheduling/deficit.py)."""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from app.scheduling.deficit import advance, team_key
from app.scheduling.entitlements import ClassDemand, allocate
from app.scheduling.model import FairState, GpuType

FAST = GpuType("fast", 80, 10, speed=2.0)
SLOW = GpuType("slow", 16, 4, speed=1.0)
TYPES = {"fast": FAST, "slow": SLOW}
ANY = (("fast", "slow"), ())
FAST_ONLY = (("fast",), ())


def test_demand_that_fits_is_granted_in_full_on_the_fastest_cards() -> None:
    e = allocate({"fast": 8, "slow": 8}, [ClassDemand("a", ANY, 3), ClassDemand("b", ANY, 4)],
                 {}, TYPES)
    assert e.by_type == {"a": {"fast": 3.0}, "b": {"fast": 4.0}}
    assert e.throughput == {"a": 6.0, "b": 8.0}


def test_one_type_is_water_filling_by_weight() -> None:
    # 12 cards; a wants 2, b and c want 100; c weighs twice b: a 2, b 10/3, c 20/3
    e = allocate({"fast": 12}, [ClassDemand("a", FAST_ONLY, 2), ClassDemand("b", FAST_ONLY, 100),
                                ClassDemand("c", FAST_ONLY, 100)], {"c": 2.0}, TYPES)
    got = {k: v["fast"] for k, v in e.by_type.items()}
    assert math.isclose(got["a"], 2, rel_tol=1e-4)
    assert math.isclose(got["b"], 10 / 3, rel_tol=1e-4)
    assert math.isclose(got["c"], 20 / 3, rel_tol=1e-4)


def test_comparative_advantage_falls_out_of_the_throughput_step() -> None:
    # b can only use the fast cards; a can use both. Each is entitled to its share, and a
    # takes the slow cards (nobody else can use them) rather than the fast ones b needs
    e = allocate({"fast": 8, "slow": 8}, [ClassDemand("a", ANY, 100),
                                          ClassDemand("b", FAST_ONLY, 100)], {}, TYPES)
    assert math.isclose(e.by_type["a"]["slow"], 8, rel_tol=1e-4)
    assert e.by_type["a"].get("fast", 0.0) < 8
    assert math.isclose(sum(e.by_type["b"].values()) + e.by_type["a"].get("fast", 0.0), 8,
                        rel_tol=1e-4)
    assert e.type_share(ANY, "slow") > e.type_share(ANY, "fast")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from("abcd"), st.sampled_from([ANY, FAST_ONLY]),
                          st.integers(1, 30)), min_size=1, max_size=8),
       st.integers(0, 16), st.integers(1, 16))
def test_allocation_is_feasible_and_leaves_no_card_idle_that_someone_wants(demands, fast, slow):
    merged: dict[tuple, float] = {}
    for team, key, cards in demands:
        merged[(team, key)] = merged.get((team, key), 0.0) + cards
    classes = [ClassDemand(t, k, c) for (t, k), c in sorted(merged.items())]
    cap = {"fast": float(fast), "slow": float(slow)}
    e = allocate(cap, classes, {}, TYPES)
    used = {"fast": 0.0, "slow": 0.0}
    for (team, key), alloc in e.cards.items():
        assert sum(alloc.values()) <= merged[(team, key)] + 1e-6  # never above demand
        for t, x in alloc.items():
            assert t in key[0] and x >= 0
            used[t] += x
    assert all(used[t] <= cap[t] + 1e-6 for t in cap)  # never above capacity
    # work-conserving: a type left with free cards means every class that may use it
    # got all it asked for
    for t in cap:
        if used[t] < cap[t] - 1e-4:
            for c in classes:
                if t in c.key[0]:
                    got = sum(e.cards.get((c.team, c.key), {}).values())
                    assert got >= min(c.cards, cap["fast"] + cap["slow"]) - 1e-3


def test_deficit_grows_while_short_decays_and_is_capped() -> None:
    h = 1000.0
    s = advance(None, 0.0, {"a": 4.0}, {"a": 0.0}, h)
    assert s.deficit == {"a": 0.0}  # a first cycle: nobody owed anything yet
    s = advance(s, 100.0, {"a": 4.0}, {"a": 0.0}, h)
    assert math.isclose(s.deficit["a"], 4 * h * (1 - math.exp(-0.1)))
    long = advance(s, 1e9, {"a": 4.0}, {"a": 0.0}, h)
    assert long.deficit["a"] <= 4 * h + 1e-9  # the cap: H x entitlement
    back = advance(long, 1e9 + 5 * h, {"a": 4.0}, {"a": 4.0}, h)
    assert back.deficit["a"] < 0.01 * long.deficit["a"]  # at its entitlement: decays away
    over = advance(FairState(0.0, {"a": 2.0 * h}), 1e9, {"a": 1.0}, {"a": 8.0}, h)
    assert over.deficit["a"] == 0.0  # over-served: credit gone, never debt
    gone = advance(s, 200.0, {}, {}, h)
    assert gone.deficit == {}  # a team with no work has nothing owed


def test_team_key_holdings_first_then_credit() -> None:
    h = 1000.0
    assert team_key(0.0, 4.0, 0.0, h) == (0.0, 0.0)
    assert team_key(0.0, 4.0, 4.0, h) == (1.0, 0.0)
    # the team furthest below its entitlement first, however much credit another has
    assert team_key(0.0, 4.0, 0.0, h) < team_key(4 * h, 4.0, 2.0, h)
    # equal holdings: the team owed more goes first
    assert team_key(4 * h, 4.0, 0.0, h) < team_key(h, 4.0, 0.0, h)


def test_the_simulator_carries_the_deficits_from_cycle_to_cycle() -> None:
    """CycleResult.fair of one cycle is Snapshot.fair of the next: a team that waits for
    the whole node builds credit while the other team's stream holds it."""
    from app.scheduling.engine import schedule
    from app.simulate.replay import Simulator
    from tests.unit.stream_fixtures import two_team_stream

    sim = Simulator(two_team_stream(40), schedule)
    seen: list[float] = []
    policy = sim.policy

    def watching(snap):
        res = policy(snap)
        assert snap.fair is None or snap.fair.at <= snap.now
        if res.fair is not None and "b" in res.fair.deficit:
            seen.append(res.fair.deficit["b"])
        return res

    sim.policy = watching
    sim.run()
    assert seen and max(seen) > 0  # b was owed credit while it waited
    assert sim.fair is not None

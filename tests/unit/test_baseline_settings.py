"""The baselines' operator settings do what the upstream documentation says they do."""

from __future__ import annotations

import json
import re

import pytest

from app.domain.config import load_config_text
from app.simulate.baseline_tuning import GRIDS, build, label, parse_settings
from app.simulate.baselines.kueue import S2A, KueuePolicy, KueueSettings
from app.simulate.baselines.slurm import DEFAULT_TIME_S, SlurmSettings
from app.simulate.command import load_scenario, run_simulate
from app.simulate.replay import ScenarioModel, Simulator
from app.simulate.suite import run_one
from tests.unit.baseline_fixtures import ONE_FLAVOR, jobs_by_name, run_policy


def test_every_grid_setting_builds():
    for p, grid in GRIDS.items():
        for s in grid:
            assert callable(build(p, s))
    with pytest.raises(ValueError):
        build("gpuq", {"x": 1})
    with pytest.raises(ValueError):
        KueueSettings(strategies=("LessThanInitialShare", S2A))  # Kueue refuses this order


def test_every_grid_setting_reads_back_from_its_label():
    """``gpuq simulate --settings`` takes the text the README and the report show."""
    for p, grid in GRIDS.items():
        for s in grid:
            assert parse_settings(p, label(s)) == s
    assert parse_settings("kueue", f"strategies={S2A}") == {"strategies": (S2A,)}
    assert parse_settings("slurm", "bf_window_s=none, priority_max_age_s=1.5d") == {
        "bf_window_s": None, "priority_max_age_s": 1.5 * 86400}


@pytest.mark.parametrize(("policy", "text", "says"), [
    ("gpuq", "x=1", "gpuq has no settings; these do: kueue"),
    ("kueue", "flavour_order=fastest", "its settings: flavor_order, when_can_borrow"),
    ("kueue", "cover_cpu_memory=yes", "cover_cpu_memory is true or false, not 'yes'"),
    ("slurm", "bf_max_job_test=lots", "bf_max_job_test=lots"),
    ("volcano", "reclaim", "setting 'reclaim' is not key=value"),
])
def test_a_settings_text_that_is_wrong_says_why(policy, text, says):
    with pytest.raises(ValueError, match=re.escape(says)):
        parse_settings(policy, text)


def test_simulate_runs_a_baseline_with_settings_and_refuses_bad_ones(tmp_path, capsys):
    sc = tmp_path / "w.yaml"
    sc.write_text(WINDOW)
    out = tmp_path / "r.json"
    assert run_simulate(str(sc), policy="slurm", settings="bf_window_s=0.5d",
                        out=str(out)) == 0
    doc = json.loads(out.read_text())
    assert doc["settings"] == "bf_window_s=0.5d"
    # the same run as the suite's (app.simulate.suite.run_one) with the same settings
    direct = run_one(load_scenario(sc), "slurm", {"bf_window_s": 43200.0})
    assert doc["summary"] == direct["summary"]
    assert "slurm (bf_window_s=0.5d):" in capsys.readouterr().out
    for policy, text, says in [("slurm", "node_weight=heaviest", "node_weight must be one of"),
                               ("gpuq", "a=1", "gpuq has no settings")]:
        assert run_simulate(str(sc), policy=policy, settings=text, out=str(out)) == 2
        assert says in capsys.readouterr().err


# -- Slurm ------------------------------------------------------------------------------

WINDOW = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: t, pool: p}]
jobs:
  - {name: first, team: t, submit_at_s: 0, runtime_s: 150000, resources: {gpus: 4}}
  - {name: big, team: t, submit_at_s: 10, runtime_s: 3600, resources: {gpus: 8}}
  - {name: small, team: t, submit_at_s: 20, runtime_s: 160000, resources: {gpus: 4}}
"""


def test_slurm_defaults_follow_slurm_conf():
    s = SlurmSettings()
    assert s.bf_max_job_test == 500 and s.priority_max_age_s == 7 * 86400
    assert s.bf_window_s is None  # the longest time limit seen, at least DefaultTime


def test_slurm_bf_window_as_long_as_the_time_limit_keeps_the_big_job_planned():
    # every limit is DefaultTime (2 days): "big" can start when "first" reaches its limit,
    # 2 days away. With bf_window >= the limit it is planned there and "small" (2-day limit)
    # may not backfill in front of it; with a 1-day window it is not planned and "small"
    # takes the free half of the node, delaying "big" past the end of "first".
    good = jobs_by_name(run_policy(WINDOW, "slurm"))
    assert good["big"]["start_s"] == 150000.0 and good["small"]["start_s"] >= 150000.0
    short = jobs_by_name(run_policy(WINDOW, "slurm", bf_window_s=86400.0))
    assert short["small"]["start_s"] < 1000.0  # the next backfill pass (bf_interval)
    assert short["big"]["start_s"] == short["small"]["end_s"] > 160000.0
    assert DEFAULT_TIME_S == 2 * 86400.0


TWO_TYPES = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, speed: 2.0}
  - {name: v100-32g, memory_gb: 32, weight: 4, speed: 1.0}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 4, cpu: 64, memory_gb: 512}
  - {name: v, count: 1, gpu_type: v100-32g, gpus: 4, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: t1, pool: p}, {name: t2, pool: p}]
jobs:
  - {name: one, team: t1, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}
"""


def _type_of(doc: dict, job: str = "one") -> str:
    return jobs_by_name(doc)[job]["allocations"][0]["gpu_type"]


def test_slurm_node_weight_by_speed():
    # slurm.conf: larger weights for faster nodes, lowest weight allocated first
    assert _type_of(run_policy(TWO_TYPES, "slurm")) == "v100-32g"
    assert _type_of(run_policy(TWO_TYPES, "slurm", node_weight="fastest")) == "a100-80g"


def test_fifo_typed_with_a_speed_preference_takes_the_fastest_allowed_type():
    assert _type_of(run_policy(TWO_TYPES, "fifo-typed")) == "a100-80g"  # first node by name
    text = TWO_TYPES.replace("name: a, count", "name: z, count")
    assert _type_of(run_policy(text, "fifo-typed")) == "v100-32g"
    assert _type_of(run_policy(text, "fifo-typed", prefer_speed=True)) == "a100-80g"



ONE_CARD = """
gpu_types: [{name: a100-80g, memory_gb: 80, weight: 10}]
nodes: [{name: a, count: 1, gpu_type: a100-80g, gpus: 1, cpu: 64, memory_gb: 512}]
pools: [{name: p}]
teams: [{name: t1, pool: p}]
jobs:
  - {name: first, team: t1, submit_at_s: 0, runtime_s: 100, resources: {gpus: 1}}
  - {name: long, team: t1, submit_at_s: 1, runtime_s: 500, duration_estimate_s: 500,
     resources: {gpus: 1}}
  - {name: short, team: t1, submit_at_s: 2, runtime_s: 50, duration_estimate_s: 50,
     resources: {gpus: 1}}
  - {name: unknown, team: t1, submit_at_s: 3, runtime_s: 10, resources: {gpus: 1}}
"""


def test_fifo_typed_shortest_first_orders_the_queue_by_expected_run_time():
    """The reference order: shortest expected run first, a job with no estimate (and no
    history to predict from) after the ones with one; plain FIFO keeps submit order."""
    fifo = jobs_by_name(run_policy(ONE_CARD, "fifo-typed"))
    assert [fifo[n]["start_s"] for n in ("long", "short", "unknown")] == [100.0, 600.0, 650.0]
    sjf = jobs_by_name(run_policy(ONE_CARD, "fifo-typed", shortest_first=True))
    assert [sjf[n]["start_s"] for n in ("short", "long", "unknown")] == [100.0, 150.0, 650.0]
    assert "shortest_first" not in {k for s in GRIDS["fifo-typed"] for k in s}
    assert parse_settings("fifo-typed", "prefer_speed=True, shortest_first=True") == {
        "prefer_speed": True, "shortest_first": True}


# -- Kueue ------------------------------------------------------------------------------

def test_kueue_flavor_order_and_when_can_borrow():
    text = TWO_TYPES + (
        "  - {name: two, team: t1, submit_at_s: 1, runtime_s: 100, resources: {gpus: 2}}\n")
    text = text.replace("runtime_s: 100, resources: {gpus: 1}", "runtime_s: 100, resources: "
                        "{gpus: 1}}\n  - {name: zero, team: t1, submit_at_s: 0, runtime_s: 100, "
                        "resources: {gpus: 1}")
    # nominal quota: 2 cards of each flavor per team. "zero" and "one" fill t1's V100 quota;
    # "two" would borrow V100s (the cheapest flavor) ...
    assert _type_of(run_policy(text, "kueue"), "two") == "v100-32g"  # MayStopSearch: borrow
    # ... TryNextFlavor takes the A100 flavor, where t1 is within its nominal quota
    assert _type_of(run_policy(text, "kueue", when_can_borrow="TryNextFlavor"), "two") == "a100-80g"
    assert _type_of(run_policy(text, "kueue", flavor_order="fastest"), "zero") == "a100-80g"




def test_kueue_cohort_quota_and_the_two_fair_sharing_strategies():
    # all quota at the cohort: the lender borrows too, so only fair sharing may preempt.
    # LessThanOrEqualToFinalShare alone: the lender's share with its job (500) is above the
    # borrower's without its only job (0): no preemption, the lender waits
    one = run_policy(ONE_FLAVOR, "kueue", nominal="cohort", strategies=(S2A,))
    assert not [e for e in one["events"] if e["type"] == "preempt"]
    assert jobs_by_name(one)["nominal"]["start_s"] == 5000.0
    # Kueue's default, both strategies: LessThanInitialShare (500 < the borrower's 1000 now)
    both = run_policy(ONE_FLAVOR, "kueue", nominal="cohort")
    pre = [e for e in both["events"] if e["type"] == "preempt"]
    assert len(pre) == 1 and "fair sharing" in pre[0]["reason"] and pre[0]["t"] == 100.0
    # split nominal quota: the lender is within its nominal quota and reclaims it
    split = run_policy(ONE_FLAVOR, "kueue")
    assert "reclaim of nominal quota" in [e for e in split["events"]
                                          if e["type"] == "preempt"][0]["reason"]


def test_kueue_covers_cpu_and_memory_in_the_share_when_asked():
    model = ScenarioModel.from_config(load_config_text(ONE_FLAVOR))
    snap = Simulator(model, lambda s: None).snapshot()  # type: ignore[arg-type,return-value]
    usage = {"borrower": {("a100-80g", "gpu"): 1.0, ("a100-80g", "cpu"): 48.0},
             "lender": {}}
    gpu_only = KueuePolicy(KueueSettings())
    gpu_only.setup(snap)
    assert gpu_only.share("borrower", usage) == 0.0  # 1 card of its 4
    covered = KueuePolicy(KueueSettings(cover_cpu_memory=True))
    covered.setup(snap)
    assert covered.share("borrower", usage) == pytest.approx((48 - 32) / 64 * 1000)


# -- Volcano ----------------------------------------------------------------------------

def test_volcano_affinity_model_prefers_the_fastest_allowed_model():
    assert _type_of(run_policy(TWO_TYPES, "volcano")) == "a100-80g"
    full = TWO_TYPES.replace("gpus: 4, cpu: 64", "gpus: 8, cpu: 64", 1)
    # without the preference, binpack over every allowed model's nodes (ties by name)
    assert _type_of(run_policy(full, "volcano", prefer_speed=False)) in ("a100-80g", "v100-32g")


DESERVED = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 8, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: a, pool: p}, {name: b, pool: p}]
jobs:
  - {name: six, team: a, submit_at_s: 0, runtime_s: 1000, resources: {gpus: 6}}
  - {name: four, team: b, submit_at_s: 0, runtime_s: 1000, resources: {gpus: 4}}
"""


def test_volcano_per_task_deserved_check():
    # each queue deserves 4 of the 8 cards; "six" would take queue a above it (the check
    # alone: without the overcommit plugin both jobs are enqueued at once)
    on = jobs_by_name(run_policy(DESERVED, "volcano", overcommit_factor=None))
    assert on["four"]["start_s"] == 0.0 and on["six"]["start_s"] >= 1000.0
    off = jobs_by_name(run_policy(DESERVED, "volcano", per_task_check=False, reclaim=False,
                                  overcommit_factor=None))
    assert off["six"]["start_s"] == 0.0 and off["four"]["start_s"] >= 1000.0


def test_volcano_without_the_reclaim_action_never_evicts():
    text = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10}
nodes:
  - {name: a, count: 1, gpu_type: a100-80g, gpus: 4, cpu: 64, memory_gb: 512}
pools: [{name: p}]
teams: [{name: early, pool: p}, {name: late, pool: p}]
jobs:
""" + "".join(f"  - {{name: e{i}, team: early, submit_at_s: 0, runtime_s: 4000, "
              f"resources: {{gpus: 1}}}}\n" for i in range(4)) + \
        "  - {name: l, team: late, submit_at_s: 100, runtime_s: 500, resources: {gpus: 1}}\n"
    # without the overcommit plugin the late job is enqueued on the full cluster
    assert [e for e in run_policy(text, "volcano", overcommit_factor=None)["events"]
            if e["type"] == "reclaim"]
    assert not [e for e in run_policy(text, "volcano", reclaim=False,
                                      overcommit_factor=None)["events"]
                if e["type"] == "reclaim"]

"""The weight tuner: triggers, cooldown, bounded step, hysteresis, what-if gate."""

from __future__ import annotations

from app.tuning.tuner import (
    ReplayOutcome,
    TunerConfig,
    TunerInputs,
    TunerMemory,
    bounded_step,
    decide,
    find_triggers,
    memory_from_history,
    what_if,
)

W = {"a100": 10.0, "v100": 4.0, "rtx": 2.0}
HOUR = 3600.0


def inputs(
    now=10 * HOUR, *, weights=None, imbalance=(), idle=None, pending=None, types=None, waits=()
):
    return TunerInputs(
        now=now,
        weights=weights or dict(W),
        base_weights=dict(W),
        idle_ratio=idle if idle is not None else {"a100": 0.0, "v100": 0.6, "rtx": 0.1},
        imbalance=imbalance,
        pending_by_pool=pending or {},
        pending_types_by_pool=types or {},
        training_waits=waits,
    )


IMBALANCE = (("a100", 12, ("v100",)),)


def better(weights):
    """A replay where cheaper v100 helps everyone."""
    p99 = 100.0 if weights["v100"] < 4.0 else 200.0
    return ReplayOutcome(p99, {"nlp": p99, "cv": 50.0}, jobs=40)


def test_no_trigger_no_proposal():
    cfg = TunerConfig(mode="auto")
    d = decide(inputs(), TunerMemory(), cfg, better)
    assert d.action == "no_trigger" and not d.recorded and d.changes == ()
    assert (
        decide(inputs(imbalance=IMBALANCE), TunerMemory(), TunerConfig(mode="off")).action == "off"
    )


def test_each_trigger_kind():
    cfg = TunerConfig(inference_pending_threshold=20, training_wait_s=HOUR)
    t = find_triggers(inputs(imbalance=IMBALANCE), cfg)
    assert [x.kind for x in t] == ["imbalance"] and t[0].up == ("a100",) and t[0].down == ("v100",)
    # inference: 21 pending > 20 (20 is not enough)
    assert find_triggers(inputs(pending={"inference": 20}), cfg) == []
    t = find_triggers(inputs(pending={"inference": 21}, types={"inference": {"rtx": 21}}), cfg)
    assert [x.kind for x in t] == ["inference_pending"]
    assert t[0].up == ("rtx",) and t[0].down == ("v100",)
    # training: waiting more than an hour (exactly an hour is not)
    assert find_triggers(inputs(waits=(("7", HOUR, "a100"),)), cfg) == []
    t = find_triggers(inputs(waits=(("7", HOUR + 1, "a100"), ("8", 10.0, "v100"))), cfg)
    assert [x.kind for x in t] == ["training_wait"] and t[0].figures["job_id"] == "7"
    assert t[0].up == ("a100",)


def test_bounded_step_and_bounds():
    cfg = TunerConfig(max_step=0.2, min_factor=0.5, max_factor=2.0)
    assert bounded_step(10, 10, +1, cfg) == 12
    assert bounded_step(10, 10, -1, cfg) == 8
    assert bounded_step(19, 10, +1, cfg) == 20  # clamped at 2 x base
    assert bounded_step(5.5, 10, -1, cfg) == 5  # clamped at 0.5 x base
    cfg = TunerConfig(mode="auto")
    d = decide(inputs(imbalance=IMBALANCE), TunerMemory(), cfg, better)
    for c in d.changes:
        assert abs(c.new - c.old) <= 0.2 * c.old + 1e-9
    # at the bound: nothing left to change
    at_bound = inputs(imbalance=IMBALANCE, weights={**W, "a100": 20.0, "v100": 2.0})
    d = decide(at_bound, TunerMemory(), cfg, None)
    assert d.action == "no_change" and "bound" in d.message
    # with a replay the mirrored candidate (a100 down, v100 up) is weighed, and it does not help
    d = decide(at_bound, TunerMemory(), cfg, better)
    assert d.action == "rejected"
    assert {c.gpu_type: c.direction for c in d.changes} == {"a100": -1, "v100": 1}


def test_auto_applies_when_gate_passes_and_records_figures():
    cfg = TunerConfig(mode="auto")
    d = decide(inputs(imbalance=IMBALANCE), TunerMemory(), cfg, better)
    assert d.action == "applied" and d.recorded
    assert {c.gpu_type: c.new for c in d.changes} == {"a100": 12.0, "v100": 3.2}
    assert d.new_weights(W) == {"a100": 12.0, "v100": 3.2, "rtx": 2.0}
    body = d.to_dict()
    assert body["triggers"][0]["kind"] == "imbalance"
    assert (
        body["gate"]["before"]["wait_p99_s"] == 200 and body["gate"]["after"]["wait_p99_s"] == 100
    )


def test_recommend_never_changes_but_records():
    d = decide(inputs(imbalance=IMBALANCE), TunerMemory(), TunerConfig(mode="recommend"), better)
    assert d.action == "proposed" and d.changes and d.gate and d.gate.passed


def test_cooldown():
    cfg = TunerConfig(mode="auto", cooldown_s=HOUR)
    now = 10 * HOUR
    mem = TunerMemory(last_action_at=now - HOUR + 1)
    d = decide(inputs(now, imbalance=IMBALANCE), mem, cfg, better)
    assert d.action == "cooldown" and not d.recorded
    mem = TunerMemory(last_action_at=now - HOUR)
    assert decide(inputs(now, imbalance=IMBALANCE), mem, cfg, better).action == "applied"


def test_hysteresis_blocks_flip_back():
    cfg = TunerConfig(mode="auto", cooldown_s=HOUR, hysteresis_s=6 * HOUR)
    t0 = 10 * HOUR
    first = decide(inputs(t0, imbalance=IMBALANCE), TunerMemory(), cfg, better)
    assert first.action == "applied"
    history = [first.to_dict()]
    weights = first.new_weights(W)
    # two hours later the imbalance is the other way round: v100 congested, a100 idle
    flip = (("v100", 15, ("a100",)),)
    idle = {"a100": 0.7, "v100": 0.0, "rtx": 0.0}

    def flip_better(w):
        p = 50.0 if w["a100"] < 12.0 else 90.0
        return ReplayOutcome(p, {"nlp": p}, jobs=10)

    mem = memory_from_history(history)
    assert mem.last_action_at == t0 and mem.last_change["v100"] == (-1, t0)
    d = decide(
        inputs(t0 + 2 * HOUR, weights=weights, imbalance=flip, idle=idle), mem, cfg, flip_better
    )
    # the reversal is blocked; only the same-direction mirror is weighed, and it does not help
    assert d.action == "rejected"
    assert {c.gpu_type: c.direction for c in d.changes} == {"a100": 1, "v100": -1}
    assert (
        decide(
            inputs(t0 + 2 * HOUR, weights=weights, imbalance=flip, idle=idle), mem, cfg, None
        ).message.count("hysteresis")
        == 2
    )
    # after the hysteresis window the reversal is allowed
    d = decide(
        inputs(t0 + 6 * HOUR, weights=weights, imbalance=flip, idle=idle), mem, cfg, flip_better
    )
    assert d.action == "applied"
    assert {c.gpu_type for c in d.changes} == {"a100", "v100"}


def test_same_direction_is_not_hysteresis():
    cfg = TunerConfig(mode="auto", cooldown_s=HOUR)
    first = decide(inputs(0.0, imbalance=IMBALANCE), TunerMemory(), cfg, better)
    mem = memory_from_history([first.to_dict()])

    def cheaper_v100_better(w):
        p99 = 25.0 * w["v100"]
        return ReplayOutcome(p99, {"nlp": p99}, jobs=10)

    d = decide(
        inputs(HOUR, weights=first.new_weights(W), imbalance=IMBALANCE),
        mem,
        cfg,
        cheaper_v100_better,
    )
    assert d.action == "applied"
    assert {c.gpu_type: c.new for c in d.changes} == {"a100": 14.4, "v100": 2.56}


def test_gate_rejects_no_improvement_and_team_harm():
    cfg = TunerConfig(mode="auto", team_margin=0.1)
    old, new = dict(W), {**W, "v100": 3.2}

    def same(w):
        return ReplayOutcome(100.0, {"nlp": 100.0}, jobs=5)

    g = what_if(old, new, same, cfg)
    assert not g.passed and "does not improve" in g.reason

    def hurts_cv(w):
        if w["v100"] < 4:
            return ReplayOutcome(80.0, {"nlp": 80.0, "cv": 111.0}, jobs=5)
        return ReplayOutcome(100.0, {"nlp": 100.0, "cv": 100.0}, jobs=5)

    g = what_if(old, new, hurts_cv, cfg)
    assert not g.passed and "cv" in g.reason

    def slightly_worse_cv(w):
        if w["v100"] < 4:
            return ReplayOutcome(80.0, {"nlp": 80.0, "cv": 110.0}, jobs=5)
        return ReplayOutcome(100.0, {"nlp": 100.0, "cv": 100.0}, jobs=5)

    assert what_if(old, new, slightly_worse_cv, cfg).passed  # within the 10% margin

    def empty(w):
        return ReplayOutcome(None, {}, jobs=0)

    assert not what_if(old, new, empty, cfg).passed
    # in auto mode a failed gate is a recorded rejection and starts the cooldown
    d = decide(inputs(imbalance=IMBALANCE), TunerMemory(), cfg, hurts_cv)
    assert d.action == "rejected" and d.recorded and d.changes
    mem = memory_from_history([d.to_dict()])
    assert mem.last_action_at == d.at and mem.last_change == {}
    # no replay available: auto never applies blind
    assert decide(inputs(imbalance=IMBALANCE), TunerMemory(), cfg, None).action == "rejected"


def test_disagreeing_triggers_leave_type_alone():
    cfg = TunerConfig(mode="recommend")
    # imbalance wants a100 up; inference queue for v100 (up) while a100 ... and v100 down
    inp = inputs(imbalance=IMBALANCE, pending={"inference": 30}, types={"inference": {"v100": 30}})
    d = decide(inp, TunerMemory(), cfg, None)
    assert "v100" not in {c.gpu_type for c in d.changes}
    assert d.action == "proposed"


def test_config_round_trip():
    cfg = TunerConfig(mode="auto", inference_pools=("serve",))
    assert TunerConfig.from_dict(cfg.to_dict()) == cfg
    assert TunerConfig.from_dict(None) == TunerConfig()
    assert TunerConfig.from_dict({"mode": "auto", "unknown": 1}).mode == "auto"


def test_mirror_candidate_wins_when_the_replay_says_so():
    def dearer_v100_better(w):
        p99 = 100.0 if w["v100"] > 4.0 else 200.0
        return ReplayOutcome(p99, {"nlp": p99}, jobs=10)

    d = decide(
        inputs(imbalance=IMBALANCE), TunerMemory(), TunerConfig(mode="auto"), dearer_v100_better
    )
    assert d.action == "applied"
    assert {c.gpu_type: c.new for c in d.changes} == {"a100": 8.0, "v100": 4.8}

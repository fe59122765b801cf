"""The ``scheduler:`` knobs of a config file are checked when it is loaded: a wrong
value is a config error naming the knob, not a TypeError deep in a cycle."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.domain.config import AlertThresholds, GpuqConfig, load_config_text
from app.scheduling.model import SchedulerConfig


@pytest.mark.parametrize(
    ("knob", "value", "says"),
    [
        ("reservation_after_s", "1.0e9", "a number >= 0"),  # YAML 1.1 reads 1.0e9 as text
        ("w_binpack", -1, "a number >= 0"),
        ("max_reservations", 2.5, "a whole number >= 0"),
        ("shortest_first", 1, "true or false"),
        ("fair_horizon_s", True, "a number >= 0"),
    ],
)
def test_a_wrong_knob_is_refused_by_name(knob, value, says):
    with pytest.raises(ValidationError) as err:
        GpuqConfig.model_validate({"scheduler": {knob: value}})
    assert f"scheduler.{knob}: must be {says}" in str(err.value)


@pytest.mark.parametrize("knob", ["aging_s", "comparative_advantage", "w_overshoot", "w_speed",
                                  "defragment_max_run_s"])
def test_a_removed_knob_is_refused_with_what_replaced_it(knob):
    with pytest.raises(ValidationError, match=rf"scheduler\.{knob}: removed"):
        GpuqConfig.model_validate({"scheduler": {knob: 1}})


def test_yaml_text_with_a_string_number_names_the_knob():
    with pytest.raises(ValidationError, match=r"scheduler\.reservation_after_s"):
        load_config_text("scheduler:\n  reservation_after_s: 1.0e9\n")


def test_good_knobs_and_alert_thresholds_pass():
    cfg = GpuqConfig.model_validate(
        {"scheduler": {"reservation_after_s": 600, "w_binpack": 0.5, "defragment": False,
                       "max_reservations": 2, "alerts": {"hol_ratio": 3, "imbalance_queued": 5}}}
    )
    sc = SchedulerConfig.from_mapping(cfg.scheduler)
    assert (sc.reservation_after_s, sc.w_binpack, sc.defragment, sc.max_reservations) == (
        600, 0.5, False, 2)


@pytest.mark.parametrize(
    ("text", "says"),
    [
        # a typo in a knob loaded and left shortest_first on
        ("scheduler:\n  shortest_frist: false\n",
         "unknown key 'shortest_frist' in scheduler (did you mean shortest_first?"),
        # a knob nothing reads (it used to be accepted)
        ("scheduler:\n  head_of_line_alert_s: 900\n", "unknown key 'head_of_line_alert_s'"),
        # a typo under alerts threw every threshold away with a log line
        ("scheduler:\n  alerts: {hol_ration: 3}\n",
         "unknown key 'hol_ration' in scheduler.alerts (did you mean hol_ratio?"),
        ("scheduler:\n  alerts: {hol_ratio: -1}\n", "scheduler.alerts.hol_ratio: must be"),
        ("scheduler:\n  alerts: 3\n", "scheduler.alerts: must be a mapping"),
        # top level and every section
        ("gpu_type:\n  - {name: a}\n", "unknown key 'gpu_type' (did you mean gpu_types?"),
        ("gpu_types:\n  - {name: a, memory_gb: 16, weight: 4, sped: 2}\n",
         "unknown key 'sped' (did you mean speed?"),
        ("pools:\n  - {name: p, guaranted: {}}\n",
         "unknown key 'guaranted' (did you mean guaranteed?"),
        ("teams:\n  - {name: t, pool: p, quota: 10}\n", "unknown key 'quota'"),
        ("nodes:\n  - {name: n, cpus: 4}\n", "unknown key 'cpus' (did you mean cpu?"),
        ("priority_classes:\n  - {name: P0, value: 1, preemptable: false}\n",
         "unknown key 'preemptable' (did you mean preemptible?"),
        ("trace:\n  format: philly\n  pth: x.csv\n", "unknown key 'pth' (did you mean path?"),
    ],
)
def test_unknown_keys_are_refused_with_the_nearest(text, says):
    with pytest.raises(ValidationError) as err:
        load_config_text(text)
    assert says in str(err.value)


def test_alert_thresholds_refuse_unknown_names():
    with pytest.raises(ValueError, match=r"did you mean hol_ratio\?"):
        AlertThresholds.from_mapping({"hol_rato": 1})
    assert AlertThresholds.from_mapping({"hol_ratio": 3}).hol_ratio == 3


def test_config_apply_dry_run_names_the_unknown_key(tmp_path, capsys):
    """``gpuq config apply --dry-run`` refuses the file before it opens a database."""
    from app.cli import main

    path = tmp_path / "gpuq.yaml"
    path.write_text("scheduler:\n  shortest_frist: false\n")
    with pytest.raises(SystemExit) as done:
        main(["config", "apply", str(path), "--dry-run"])
    assert done.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuq: error: invalid config ")
    assert ("scheduler: unknown key 'shortest_frist' in scheduler "
            "(did you mean shortest_first?") in err

"""The ``scheduler:`` knobs of a config file are checked when it is loaded: a wrong
value is a config error naming the knob, not a TypeError deep in a cycle."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from app.domain.config import GpuqConfig, load_config_text
from app.scheduling.model import SchedulerConfig


@pytest.mark.parametrize(
    ("knob", "value", "says"),
    [
        ("reservation_after_s", "1.0e9", "a number >= 0"),  # YAML 1.1 reads 1.0e9 as text
        ("w_speed", -1, "a number >= 0"),
        ("max_reservations", 2.5, "a whole number >= 0"),
        ("shortest_first", 1, "true or false"),
        ("aging_s", True, "a number >= 0"),
    ],
)
def test_a_wrong_knob_is_refused_by_name(knob, value, says):
    with pytest.raises(ValidationError) as err:
        GpuqConfig.model_validate({"scheduler": {knob: value}})
    assert f"scheduler.{knob}: must be {says}" in str(err.value)


def test_yaml_text_with_a_string_number_names_the_knob():
    with pytest.raises(ValidationError, match=r"scheduler\.reservation_after_s"):
        load_config_text("scheduler:\n  reservation_after_s: 1.0e9\n")


def test_good_knobs_and_loop_settings_pass():
    cfg = GpuqConfig.model_validate(
        {"scheduler": {"reservation_after_s": 600, "w_speed": 0.5, "defragment": False,
                       "max_reservations": 2, "head_of_line_alert_s": 900}}
    )
    sc = SchedulerConfig.from_mapping(cfg.scheduler)
    assert (sc.reservation_after_s, sc.w_speed, sc.defragment, sc.max_reservations) == (
        600, 0.5, False, 2)

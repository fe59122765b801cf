"""Each baseline's operator settings: a small grid, chosen on the tuning windows only.

A baseline run with one arbitrary configuration is a straw man. Each model has
the knobs its documentation gives an operator (``KueueSettings``,
``VolcanoSettings``, ``SlurmSettings``, ``fifo-typed``'s speed preference; the
modules say which upstream file each follows), and :data:`GRIDS` lists the
settings a competent operator would consider here. :func:`tune` runs every
setting on every *tuning* window (:mod:`app.simulate.windows`) and picks, per
baseline, the setting with the lowest **score**: over the tuning windows, the
mean of ``(mean JCT / the best mean JCT of that baseline's settings on the
window + (worst team's P99 wait + 600 s) / (the best such P99 + 600 s)) / 2``
-- the two measures gpuq's goal is judged on, each relative to what the
baseline can reach on that window, so no window weighs more for being long
(the 600 s keep a P99 of 0 from making every other one infinitely worse, or
all equal). Ties go to the earlier setting of the grid (the upstream defaults
come first). The chosen settings
are then the only ones run on the evaluation windows. gpuq itself is not
tuned: it runs its defaults.

Every setting gets what gpuq gets: the scenario's GPU types with their memory
and the operator's speed table (``GpuType.speed``), each job's
``duration_estimate_s`` when it has one and else the run time its team's history
predicts (``JobRequest.predicted_s``; Slurm's time limit).
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import typing
from collections.abc import Callable
from typing import Any

from app.scheduling.model import Policy
from app.simulate.all_policies import make_policy
from app.simulate.baselines.fifo import fifo_typed_with
from app.simulate.baselines.kueue import KueueSettings, kueue
from app.simulate.baselines.slurm import DAY, SlurmSettings, slurm
from app.simulate.baselines.volcano import VolcanoSettings, volcano

Settings = dict[str, Any]
P99_FLOOR_S = 600.0  # added to both sides of the P99 ratio (module docstring)

FACTORIES: dict[str, Callable[..., Policy]] = {
    "kueue": kueue,
    "volcano": volcano,
    "slurm": slurm,
    "fifo-typed": fifo_typed_with,
}

#: the settings dataclass of each baseline that has one (fifo-typed: its factory's arguments)
SETTINGS_CLASSES: dict[str, type] = {
    "kueue": KueueSettings, "volcano": VolcanoSettings, "slurm": SlurmSettings}

GRIDS: dict[str, list[Settings]] = {
    # flavor order (cheapest first keeps big cards for the jobs that need them; fastest
    # first gives each job its best card), whenCanBorrow, nominal quota rule, and CPU and
    # memory in the resource group; both fair-sharing strategies (Kueue's default) in all.
    # A covered setting comes before its uncovered twin: Kueue's
    # site/content/en/docs/concepts/cluster_queue.md ("Flavors and Resources", "Resource
    # Groups") ties cpu, memory and GPUs to one flavor and lists cpu and memory in every
    # example's coveredResources, and a workload asking for a resource its ClusterQueue
    # does not cover is inadmissible ("resource ... unavailable in ClusterQueue",
    # pkg/scheduler/flavorassigner/flavorassigner.go) unless the operator sets
    # excludeResourcePrefixes (Configuration API, apis/config/v1beta1/
    # configuration_types.go), so covering them is the ordinary setup and wins a tie.
    "kueue": [
        {},
        {"flavor_order": "fastest", "cover_cpu_memory": True},
        {"flavor_order": "fastest"},
        {"flavor_order": "fastest", "when_can_borrow": "TryNextFlavor"},
        {"nominal": "cohort"},
        {"flavor_order": "fastest", "nominal": "cohort", "cover_cpu_memory": True},
        {"flavor_order": "fastest", "nominal": "cohort"},
    ],
    # resource model, speed preference (preferred node affinity), reclaim action, the
    # overcommit plugin (in the chart's conf, factor 1.2) or not
    # (docs/user-guide/how_to_configure_scheduler.md: an operator's choice of plugins)
    "volcano": [
        {},
        {"reclaim": False},
        {"prefer_speed": False},
        {"resource_model": "pinned"},
        {"overcommit_factor": None},
    ],
    # node Weight by GPU type, PriorityMaxAge, time limits from the history's prediction
    # or DefaultTime; bf_window >= the longest time limit and bf_max_job_test 500 in all
    "slurm": [
        {},
        {"node_weight": "fastest"},
        {"node_weight": "none"},
        {"priority_max_age_s": 1 * DAY},
        {"node_weight": "fastest", "priority_max_age_s": 1 * DAY},
        {"time_limits": "default"},
        {"node_weight": "fastest", "time_limits": "default"},
    ],
    "fifo-typed": [
        {},
        {"prefer_speed": True},
    ],
}


def build(policy: str, settings: Settings | None = None) -> Policy:
    """A fresh policy object: a baseline with these settings, or any policy by name."""
    if settings and policy not in FACTORIES:
        raise ValueError(f"{policy} has no settings to tune")
    if policy in FACTORIES and settings:
        return FACTORIES[policy](**settings)
    return make_policy(policy)


def _setting_types(policy: str) -> dict[str, Any]:
    """The settings a baseline takes and their types: its settings dataclass's fields,
    or the factory's keyword arguments (``fifo-typed``)."""
    holder: Any = SETTINGS_CLASSES.get(policy, FACTORIES[policy])
    hints = typing.get_type_hints(holder)
    names = ([f.name for f in dataclasses.fields(holder)] if dataclasses.is_dataclass(holder)
             else [n for n in inspect.signature(holder).parameters])
    return {n: hints[n] for n in names}


def _value(key: str, text: str, kind: Any) -> Any:
    """One setting's text as its type: ``True``/``False``; a number; a ``_s`` key also
    in days as :func:`label` prints it (``1.5d``); ``None``; a list joined by ``+``."""
    t = text.strip()
    args = typing.get_args(kind)
    if t.lower() == "none" and type(None) in args:
        return None
    if kind is bool:
        if t.lower() not in ("true", "false"):
            raise ValueError(f"{key} is true or false, not {t!r}")
        return t.lower() == "true"
    if kind is int:
        return int(t)
    if kind is float or float in args:
        if key.endswith("_s") and t.endswith("d"):
            return float(t[:-1]) * DAY
        return float(t)
    if typing.get_origin(kind) is tuple:
        return tuple(x.strip() for x in t.split("+"))
    return t


def parse_settings(policy: str, text: str) -> Settings:
    """A baseline's settings from ``key=value, key=value`` -- the text :func:`label`
    prints, as the README and the suite's report show each chosen setting -- so one
    tuned baseline can be run alone (``gpuq simulate --policy kueue --settings ...``).
    ValueError says what is wrong: a policy without settings, an unknown key (and the
    known ones), a value that is not of the key's type; the model's own checks follow
    when the policy is built."""
    if policy not in FACTORIES:
        raise ValueError(f"{policy} has no settings; these do: {', '.join(FACTORIES)}")
    types = _setting_types(policy)
    out: Settings = {}
    if text.strip() in ("", "defaults"):
        return out
    for part in text.split(","):
        key, eq, val = part.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"setting {part.strip()!r} is not key=value")
        if key not in types:
            raise ValueError(f"{policy} has no setting {key!r}; its settings: "
                             f"{', '.join(types)}")
        try:
            out[key] = _value(key, val, types[key])
        except ValueError as e:
            raise ValueError(f"{key}={val.strip()}: {e}") from None
    return out



def settings_arg(policy: str) -> Callable[[str], Settings]:
    """:func:`parse_settings` for an ``argparse`` option of ``policy`` (the real-system
    harnesses configure the real scheduler from the same text): the settings are also
    built into the model's own settings, so a value the model refuses (a flavor order it
    does not know) is refused on the command line, and each error keeps its message
    (argparse drops a ValueError's)."""
    import argparse

    def parse(text: str) -> Settings:
        try:
            out = parse_settings(policy, text)
            held = SETTINGS_CLASSES.get(policy)
            if held is not None:
                held(**out)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(f"{policy} settings {text!r}: {e}") from None
        return out

    parse.__name__ = f"{policy} settings"
    return parse

def label(settings: Settings | None) -> str:
    """A short text of the settings that differ from the model's defaults."""
    if not settings:
        return "defaults"
    parts = []
    for k, v in settings.items():
        if k.endswith("_s") and isinstance(v, (int, float)):
            v = f"{v / DAY:g}d"
        elif isinstance(v, (tuple, list)):
            v = "+".join(map(str, v))
        parts.append(f"{k}={v}")
    return ", ".join(parts)


def score(results: dict[str, dict[str, dict[str, Any]]]) -> dict[str, float]:
    """Each setting's score (module docstring) from ``{window: {setting label: summary}}``."""
    def best(runs: dict[str, dict[str, Any]], key: str) -> float | None:
        vals = [s[key] for s in runs.values() if s.get(key) is not None]
        return min(vals) if vals else None

    totals: dict[str, list[float]] = {}
    for runs in results.values():
        bj, bp = best(runs, "jct_mean_s"), best(runs, "worst_team_wait_p99_s")
        for lab, s in runs.items():
            rj = (s["jct_mean_s"] or 0.0) / bj if bj else 1.0
            rp = ((s.get("worst_team_wait_p99_s") or 0.0) + P99_FLOOR_S) / (
                (bp or 0.0) + P99_FLOOR_S)
            totals.setdefault(lab, []).append((rj + rp) / 2.0)
    return {lab: sum(v) / len(v) for lab, v in totals.items()}


def tune(models: dict[str, Any], policies: list[str],
         run: Callable[[Any, str, Settings | None], dict[str, Any]],
         progress: bool = False) -> dict[str, Any]:
    """Every grid setting of each baseline in ``policies`` on every tuning window
    (``models``: window name -> ScenarioModel); returns, per baseline, the grid, each
    setting's per-window summary, its score and the chosen setting."""
    out: dict[str, Any] = {}
    for p in policies:
        grid = GRIDS.get(p)
        if not grid:
            continue
        t0 = time.process_time()
        results: dict[str, dict[str, dict[str, Any]]] = {}
        for name, model in models.items():
            for settings in grid:
                r = run(model, p, settings)
                results.setdefault(name, {})[label(settings)] = r["summary"]
                if progress:
                    s = r["summary"]
                    print(f"tune {p} [{label(settings)}] on {name}: jct mean "
                          f"{s['jct_mean_s']}, worst team p99 {s['worst_team_wait_p99_s']}",
                          flush=True)
        out[p] = choose({
            "grid": grid,
            "windows": {w: {lab: {k: s.get(k) for k in (
                "jct_mean_s", "worst_team_wait_p99_s", "max_team_slowdown",
                "jain_slowdown", "jobs_not_finished")} for lab, s in runs.items()}
                for w, runs in results.items()},
            "cpu_s": round(time.process_time() - t0, 2),
        })
    return out


def choose(entry: dict[str, Any]) -> dict[str, Any]:
    """``entry`` (a baseline's grid and per-window results) with its scores and the chosen
    setting (re)computed by the rule above: a stored tuning is always judged by it."""
    grid = entry["grid"]
    scores = score(entry["windows"])
    labels = [label(s) for s in grid]
    best = min(range(len(grid)), key=lambda i: (round(scores[labels[i]], 9), i))
    return {**entry, "scores": {lab: round(scores[lab], 6) for lab in labels},
            "chosen": grid[best], "chosen_label": labels[best]}

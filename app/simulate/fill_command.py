"""``gpuq simulate SCENARIO --protocol fill``: load the trace, run the seeds, write the result.

The scenario names the trace (``trace: {format: alibaba-openb, nodes: ..,
pods: ..}``; relative paths are relative to the scenario file) and may
tune the live core under ``scheduler:`` (``w_binpack``, ``w_balance``, ...), which the
``gpuq`` policy uses as a live config would.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from app.domain.config import load_config
from app.domain.errors import error_line, unknown
from app.simulate.alibaba import read_nodes, read_pods
from app.simulate.fill import FILL_POLICIES, check_placements, parse_seeds, run_fill, summarize
from app.simulate.report import write_fill_report
from app.simulate.traces import trace_file


class ScenarioError(ValueError):
    """The scenario cannot be run with this protocol (message names the field)."""


def trace_paths(
    scenario: str | Path, trace_dir: str | Path | None = None
) -> tuple[Path, Path, dict[str, Any]]:
    cfg = load_config(scenario)
    if cfg.trace is None or cfg.trace.format != "alibaba-openb":
        raise ScenarioError("trace: the fill protocol needs trace.format alibaba-openb")
    if not cfg.trace.nodes or not cfg.trace.pods:
        raise ScenarioError("trace: alibaba-openb needs both trace.nodes and trace.pods")
    base = Path(scenario).resolve().parent
    try:
        nodes = trace_file(base, cfg.trace.nodes, "nodes", trace_dir)
        pods = trace_file(base, cfg.trace.pods, "pods", trace_dir)
    except ValueError as e:
        raise ScenarioError(str(e)) from None
    return nodes, pods, dict(cfg.scheduler)


def fill_result(
    scenario: str | Path,
    *,
    policy: str,
    seeds: list[int],
    inflate: float = 1.3,
    show_progress: bool = False,
    trace_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Run the fill protocol for every seed and return the fill result document (re-checked)."""
    if policy not in FILL_POLICIES:
        raise ScenarioError(f"policy: {unknown('fill policy', policy, FILL_POLICIES)}")
    if not 0 < inflate <= 10:
        raise ScenarioError("inflate: must be in (0, 10]")
    nodes_path, pods_path, scheduler = trace_paths(scenario, trace_dir)
    nodes = read_nodes(nodes_path)
    pods = read_pods(pods_path)
    runs = []
    for seed in seeds:
        progress = _ProgressBar(f"{policy} seed {seed}") if show_progress else None
        try:
            run = run_fill(
                nodes,
                pods,
                policy=policy,
                seed=seed,
                inflate=inflate,
                scheduler=scheduler,
                progress=progress.update if progress else None,
            )
        finally:
            if progress:
                progress.close()
        problems = check_placements(nodes, pods, run.placements)
        if problems:
            raise RuntimeError(f"seed {seed}: placements failed re-check: {problems[:5]}")
        runs.append(run)
    result = summarize(runs)
    result["trace"] = {"nodes": str(nodes_path), "pods": str(pods_path)}
    result["inflate"] = inflate
    result["scheduler"] = scheduler
    return result


class _ProgressBar:
    """A small rich progress bar on stderr (only when stderr is a terminal)."""

    def __init__(self, label: str) -> None:
        self._p = None
        if sys.stderr.isatty():
            from rich.progress import Progress

            self._p = Progress(transient=True)
            self._p.start()
            self._task = self._p.add_task(label, total=None)

    def update(self, done: int, total: int) -> None:
        if self._p is not None:
            self._p.update(self._task, completed=done, total=total)

    def close(self) -> None:
        if self._p is not None:
            self._p.stop()

    def __bool__(self) -> bool:
        return True


def run_fill_command(
    scenario: str,
    *,
    policy: str,
    seed: int,
    seeds: str | None,
    inflate: float,
    out: str | None,
    report: str | None,
    trace_dir: str | None = None,
) -> int:
    try:
        seed_list = parse_seeds(seeds, seed)
    except ValueError as e:
        print(error_line(f"--seeds: {e}"), file=sys.stderr)
        return 2
    try:
        result = fill_result(
            scenario, policy=policy, seeds=seed_list, inflate=inflate, show_progress=True,
            trace_dir=trace_dir,
        )
    except (ScenarioError, ValueError, OSError) as e:
        print(error_line(e), file=sys.stderr)
        return 2
    text = json.dumps(result)
    if out:
        Path(out).write_text(text)
    print(
        f"fill {policy}: {result['total_gpus']} GPUs, seeds {seed_list[0]}..{seed_list[-1]}: "
        f"unallocated at 100% arrived = {result['unallocated_pct_at_100']}% (median)"
    )
    if report:

        write_fill_report([result], report)
        print(f"report written to {report}")
    return 0

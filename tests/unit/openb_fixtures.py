"""Tiny generated openb-format CSVs (tests never read the real traces)."""

from __future__ import annotations

import random
from pathlib import Path

NODE_HEADER = "sn,cpu_milli,memory_mib,gpu,model"
POD_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)


def write_nodes(path: Path, rows: list[tuple]) -> Path:
    path.write_text("\n".join([NODE_HEADER, *(",".join(map(str, r)) for r in rows)]) + "\n")
    return path


def write_pods(path: Path, rows: list[tuple], header: str = POD_HEADER) -> Path:
    path.write_text("\n".join([header, *(",".join(map(str, r)) for r in rows)]) + "\n")
    return path


def random_trace(tmp: Path, seed: int, n_nodes: int = 12, n_pods: int = 80) -> tuple[Path, Path]:
    """A small heterogeneous cluster and a pod mix like openb's (shares, whole, multi, CPU)."""
    rng = random.Random(seed)
    models = [("G2", 8, 96000, 393216), ("T4", 2, 104000, 524288), ("P100", 2, 16000, 122880),
              ("V100M16", 4, 32000, 131072)]
    nodes = []
    for i in range(n_nodes):
        m, g, c, mem = rng.choice(models)
        nodes.append((f"node-{i:03d}", c, mem, g, m))
    pods = []
    for i in range(n_pods):
        kind = rng.random()
        if kind < 0.15:
            num, milli = 0, 0
        elif kind < 0.5:
            num, milli = 1, rng.choice([160, 320, 470, 650, 810])
        elif kind < 0.9:
            num, milli = 1, 1000
        else:
            num, milli = rng.choice([2, 4, 8]), 1000
        spec = rng.choice(["", "", "", "T4", "V100M16|P100"]) if num else ""
        cpu = rng.choice([2000, 4000, 8000, 12000, 16000])
        mem = rng.choice([4096, 16384, 32768])
        pods.append((f"pod-{i:04d}", cpu, mem, num, milli, spec, "LS", "Running", i, i + 100, i))
    return (write_nodes(tmp / "nodes.csv", nodes), write_pods(tmp / "pods.csv", pods))

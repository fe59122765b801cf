"""Reader for the Alibaba GPU cluster trace 2023 ("openb", the FGD paper's data).

The trace has two CSV files: GPU nodes (``sn, cpu_milli, memory_mib, gpu,
model``) and pods (``name, cpu_milli, memory_mib, num_gpu, gpu_milli`` and,
in most variants, ``gpu_spec, qos, pod_phase, creation_time,
deletion_time, scheduled_time``). Values are kept in the trace's own
integer units (milli-CPU, MiB, milli-GPU) so the fill protocol compares
exactly what the paper's simulator compares; conversion to gpuq's units
(CPU cores, GB, ``gpu_share``) happens only when building a scenario.

GPU models become gpuq GPU types through :data:`GPU_MODELS`, the one table
of assumptions (also in the README's Evaluation section). The memory of
the public models is the device memory the FGD simulator uses; G2 and G3
are undisclosed internal codes, so their memory and all weights are our
assumptions. Every type is shareable (the trace is a GPU-sharing cluster).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from app.domain.config import GpuTypeConfig, NodeConfig
from app.domain.spec import JobSpec


@dataclass(frozen=True, slots=True)
class GpuModel:
    type_name: str  # gpuq GPU type name (a DNS label)
    memory_gb: float
    weight: float  # CU of one card
    source: str  # where the memory figure comes from


# One table: trace model -> gpuq GPU type. Weights are relative throughput
# (T4 = 1), rounded; they only matter for CU accounting, not for the fill
# protocol (which counts GPU-milli).
GPU_MODELS: dict[str, GpuModel] = {
    "G2": GpuModel("g2", 16.0, 1.5, "assumed (undisclosed internal model)"),
    "T4": GpuModel("t4", 15.8, 1.0, "Tesla T4, 15,109 MiB"),
    "G3": GpuModel("g3", 32.0, 3.0, "assumed (undisclosed internal model)"),
    "P100": GpuModel("p100", 17.1, 1.5, "Tesla P100 PCIe 16GB, 16,280 MiB"),
    "V100M32": GpuModel("v100m32", 34.1, 3.0, "Tesla V100 SXM2 32GB, 32,510 MiB"),
    "V100M16": GpuModel("v100m16", 16.9, 3.0, "Tesla V100 SXM2 16GB, 16,160 MiB"),
    "A10": GpuModel("a10", 23.8, 2.5, "NVIDIA A10, 22,731 MiB"),
}

MIB_TO_GB = 1.048576 / 1000.0  # 1 MiB = 1.048576 MB


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str  # trace model code, "" for a CPU-only node


@dataclass(frozen=True, slots=True)
class TracePod:
    """One pod. ``gpu_milli`` is per GPU; ``gpu_spec`` the allowed models (empty = any)."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()
    creation_time: float | None = None
    deletion_time: float | None = None
    scheduled_time: float | None = None
    phase: str = ""
    qos: str = ""  # LS, BE, Burstable, Guaranteed (the timed replay's teams)

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli

    @property
    def is_share(self) -> bool:
        return self.num_gpu == 1 and 0 < self.gpu_milli < 1000


class TraceFormatError(ValueError):
    """The file is not an openb CSV (a named column is missing or a value is bad)."""


def _int(row: dict[str, str], col: str, path: Path, line: int) -> int:
    raw = row.get(col)
    if raw is None:
        raise TraceFormatError(f"{path}: column {col!r} missing")
    try:
        return int(float(raw)) if raw.strip() else 0
    except ValueError:
        raise TraceFormatError(f"{path}:{line}: {col}={raw!r} is not a number") from None


def _opt_float(row: dict[str, str], col: str) -> float | None:
    raw = (row.get(col) or "").strip()
    if not raw:
        return None
    try:
        return float(raw)
    except ValueError:
        return None


def read_nodes(path: str | Path, *, gpu_only: bool = True) -> list[TraceNode]:
    """Nodes in file order; CPU-only nodes are skipped unless ``gpu_only`` is False."""
    p = Path(path)
    out: list[TraceNode] = []
    with p.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            gpus = _int(row, "gpu", p, i)
            model = (row.get("model") or "").strip()
            if model.lower() == "nan":
                model = ""
            if gpu_only and gpus == 0:
                continue
            if gpus > 0 and model not in GPU_MODELS:
                raise TraceFormatError(
                    f"{p}:{i}: GPU model {model!r} is not in the model table "
                    f"({', '.join(GPU_MODELS)})"
                )
            out.append(
                TraceNode(
                    name=row.get("sn") or f"node-{i - 2}",
                    cpu_milli=_int(row, "cpu_milli", p, i),
                    memory_mib=_int(row, "memory_mib", p, i),
                    gpus=gpus,
                    model=model,
                )
            )
    return out


def read_pods(path: str | Path) -> list[TracePod]:
    """Pods in file order; columns beyond the first five are optional."""
    p = Path(path)
    out: list[TracePod] = []
    with p.open(newline="") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            spec_raw = (row.get("gpu_spec") or "").strip()
            spec = () if spec_raw.lower() in ("", "nan") else tuple(
                dict.fromkeys(s.strip() for s in spec_raw.split("|") if s.strip())
            )
            num = _int(row, "num_gpu", p, i)
            milli = _int(row, "gpu_milli", p, i)
            if num < 0 or not 0 <= milli <= 1000 or (num > 1 and milli not in (0, 1000)):
                raise TraceFormatError(f"{p}:{i}: bad GPU request num_gpu={num} gpu_milli={milli}")
            if num == 0:
                milli = 0
            elif milli == 0:
                milli = 1000
            out.append(
                TracePod(
                    name=row.get("name") or f"pod-{i - 2}",
                    cpu_milli=_int(row, "cpu_milli", p, i),
                    memory_mib=_int(row, "memory_mib", p, i),
                    num_gpu=num,
                    gpu_milli=milli,
                    gpu_spec=spec,
                    creation_time=_opt_float(row, "creation_time"),
                    deletion_time=_opt_float(row, "deletion_time"),
                    scheduled_time=_opt_float(row, "scheduled_time"),
                    phase=(row.get("pod_phase") or "").strip(),
                    qos=(row.get("qos") or "").strip(),
                )
            )
    return out


def gpu_type_configs(models: set[str] | None = None) -> list[GpuTypeConfig]:
    """The default GPU types for the trace's models (all of them if ``models`` is None)."""
    return [
        GpuTypeConfig(name=m.type_name, memory_gb=m.memory_gb, weight=m.weight, shareable=True)
        for code, m in GPU_MODELS.items()
        if models is None or code in models
    ]


def node_configs(nodes: list[TraceNode]) -> list[NodeConfig]:
    """Trace nodes as config nodes (CPU cores, GB)."""
    return [
        NodeConfig(
            name=n.name,
            gpu_type=GPU_MODELS[n.model].type_name if n.gpus else None,
            gpus=n.gpus,
            cpu=n.cpu_milli / 1000.0,
            memory_gb=round(n.memory_mib * MIB_TO_GB, 6),
        )
        for n in nodes
    ]


def pod_job_spec(pod: TracePod, *, team: str = "openb", pool: str | None = None) -> JobSpec:
    """One pod as a scenario job: gpu_milli -> gpu_share, gpu_spec -> allowed types.

    Submit time is ``creation_time``; run time ``deletion_time - creation_time``
    (pods without a deletion time run one hour).
    """
    types = [GPU_MODELS[m].type_name for m in pod.gpu_spec if m in GPU_MODELS]
    resources: dict[str, object] = {
        "cpu": pod.cpu_milli / 1000.0,
        "memory_gb": round(pod.memory_mib * MIB_TO_GB, 6),
        "gpu_types": types,
    }
    if pod.is_share:
        resources["gpu_share"] = pod.gpu_milli / 1000.0
    else:
        resources["gpus"] = pod.num_gpu
    start = pod.creation_time or 0.0
    runtime = 3600.0
    if pod.deletion_time is not None and pod.deletion_time > start:
        runtime = pod.deletion_time - start
    data: dict[str, object] = {
        "name": pod.name,
        "team": team,
        "resources": resources,
        "submit_at_s": start,
        "runtime_s": runtime,
    }
    if pool:
        data["pool"] = pool
    return JobSpec.model_validate(data)

"""Compute units (CU): the one currency of quotas and fair shares.

A whole card is worth its type's ``weight``; a MIG slice ``weight x
compute_fraction``; a vGPU share x of a card ``weight x x``.
"""

from __future__ import annotations

from app.scheduling.model import GpuType


def whole_cards(gpu_type: GpuType, count: int) -> float:
    return gpu_type.weight * count


def mig_slice(gpu_type: GpuType, profile: str) -> float:
    return gpu_type.weight * gpu_type.mig_profiles[profile].compute_fraction


def share(gpu_type: GpuType, fraction: float) -> float:
    return gpu_type.weight * fraction

"""pyproject's package data names files that exist (a wheel ships them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_data_pattern_matches_a_file() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["gpuq"]
    missing = [p for p in patterns if not any((ROOT / "gpuq").glob(p))]
    assert not missing, f"package data that does not exist: {missing}"


def test_migrations_ship_with_the_package() -> None:
    """`gpuq db upgrade` runs from an installed wheel: the script template and
    every revision are inside the package."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["gpuq"]
    assert "migrations/script.py.mako" in patterns
    assert any((ROOT / "gpuq" / "migrations" / "versions").glob("0001_*.py"))

"""pyproject's package data names files that exist (a wheel ships them)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_every_package_data_pattern_matches_a_file() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["app"]
    missing = [p for p in patterns if not any((ROOT / "app").glob(p))]
    assert not missing, f"package data that does not exist: {missing}"


def test_migrations_ship_with_the_package() -> None:
    """`gpuq db upgrade` runs from an installed wheel: the script template and
    every revision are inside the package."""
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    patterns = cfg["tool"]["setuptools"]["package-data"]["app"]
    assert "migrations/script.py.mako" in patterns
    assert any((ROOT / "app" / "migrations" / "versions").glob("0001_*.py"))

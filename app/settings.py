"""Runtime settings from the environment (pydantic-settings).

Nothing is built at import time: call :func:`get_settings` (or construct
:class:`Settings` directly in tests) so that each process and each test
decides its own configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything gpuq reads from the environment."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    test_database_url: str | None = Field(default=None, alias="TEST_DATABASE_URL")
    data_dir: Path = Field(default=Path(".gpuq"), alias="GPUQ_DATA_DIR")
    admin_token: str | None = Field(default=None, alias="GPUQ_ADMIN_TOKEN")
    cluster: Literal["simulated", "kubernetes"] = Field(default="simulated", alias="GPUQ_CLUSTER")
    config_file: Path | None = Field(default=None, alias="GPUQ_CONFIG")
    sim_speed: float = Field(default=1.0, gt=0, alias="GPUQ_SIM_SPEED")
    host: str = Field(default="127.0.0.1", alias="GPUQ_HOST")
    port: int = Field(default=8000, ge=1, le=65535, alias="GPUQ_PORT")
    dispatch_interval_s: float = Field(default=1.0, gt=0, alias="GPUQ_DISPATCH_INTERVAL")
    descheduler_interval_s: float = Field(default=30.0, gt=0, alias="GPUQ_DESCHEDULER_INTERVAL")
    lease_reaper_interval_s: float = Field(default=5.0, gt=0, alias="GPUQ_LEASE_REAPER_INTERVAL")
    max_body_bytes: int = Field(default=1_000_000, alias="GPUQ_MAX_BODY_BYTES")
    run_loops: bool = Field(default=True, alias="GPUQ_RUN_LOOPS")
    prometheus_url: str | None = Field(default=None, alias="GPUQ_PROMETHEUS_URL")
    # the dashboard asks for a token unless an operator opens it read-only to everyone
    ui_public: bool = Field(default=False, alias="GPUQ_UI_PUBLIC")
    # estimated start times are recomputed at most this often (a bounded forward replay)
    estimate_interval_s: float = Field(default=30.0, gt=0, alias="GPUQ_ESTIMATE_INTERVAL")


def get_settings() -> Settings:
    """Read the settings now (never cached at import)."""
    return Settings()

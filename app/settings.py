"""Runtime settings from the environment (pydantic-settings).

Nothing is built at import time: call :func:`get_settings` (or construct
:class:`Settings` directly in tests) so that each process and each test
decides its own configuration.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Everything gpuq reads from the environment."""

    model_config = SettingsConfigDict(env_prefix="", extra="ignore", populate_by_name=True)

    # PostgreSQL URL (postgresql+psycopg://user@host/db); unset: gpuq starts an embedded
    # PostgreSQL in GPUQ_DATA_DIR/pg
    database_url: str | None = Field(default=None, alias="DATABASE_URL")
    # server for the tests; each test run creates and drops its own database on it (unset: embedded)
    test_database_url: str | None = Field(default=None, alias="TEST_DATABASE_URL")
    # embedded PostgreSQL data (pg/) and the generated admin token (admin_token)
    data_dir: Path = Field(default=Path(".gpuq"), alias="GPUQ_DATA_DIR")
    # the admin bearer token; unset: generated on first start, printed once, kept in the data folder
    admin_token: str | None = Field(default=None, alias="GPUQ_ADMIN_TOKEN")
    # a file holding DATABASE_URL (a mounted Secret, so the value is never in the
    # environment, `kubectl describe` or /proc/<pid>/environ); read when DATABASE_URL is unset
    database_url_file: Path | None = Field(default=None, alias="DATABASE_URL_FILE")
    # a file holding GPUQ_ADMIN_TOKEN (a mounted Secret); read when that variable is unset
    admin_token_file: Path | None = Field(default=None, alias="GPUQ_ADMIN_TOKEN_FILE")
    # cluster backend: the in-process simulated cluster, or the Kubernetes API (in-cluster
    # ServiceAccount or KUBECONFIG)
    cluster: Literal["simulated", "kubernetes"] = Field(default="simulated", alias="GPUQ_CLUSTER")
    # config YAML applied at start (upsert by name); unset: the packaged demo, app/config/demo.yaml
    config_file: Path | None = Field(default=None, alias="GPUQ_CONFIG")
    # simulated cluster only: a job runs duration_estimate_s / GPUQ_SIM_SPEED seconds
    sim_speed: float = Field(default=1.0, gt=0, alias="GPUQ_SIM_SPEED")
    # address the API listens on
    host: str = Field(default="127.0.0.1", alias="GPUQ_HOST")
    # port the API listens on
    port: int = Field(default=8000, ge=1, le=65535, alias="GPUQ_PORT")
    # seconds between dispatcher passes (a submit's NOTIFY also wakes it)
    dispatch_interval_s: float = Field(default=1.0, gt=0, alias="GPUQ_DISPATCH_INTERVAL")
    # a dispatcher pass running longer than this ends the process after releasing
    # leadership (the Deployment restarts it), and /healthz fails; 0 = no bound
    pass_deadline_s: float = Field(default=300.0, ge=0, alias="GPUQ_PASS_DEADLINE")
    # seconds between descheduler passes (P0 room, defragmentation)
    descheduler_interval_s: float = Field(default=30.0, gt=0, alias="GPUQ_DESCHEDULER_INTERVAL")
    # seconds between passes of the lease reaper (reclaims expired borrow leases)
    lease_reaper_interval_s: float = Field(default=5.0, gt=0, alias="GPUQ_LEASE_REAPER_INTERVAL")
    # seconds between the metrics passes each API process runs in the background, so a
    # scrape renders a pass at most this old instead of computing one (0: scrapes compute)
    metrics_refresh_s: float = Field(default=2.5, ge=0, alias="GPUQ_METRICS_REFRESH_S")
    # largest request body accepted (413 above)
    max_body_bytes: int = Field(default=1_000_000, alias="GPUQ_MAX_BODY_BYTES")
    # whether the app runs the dispatcher loops; `gpuq serve` sets it true and `gpuq api` false,
    # so it matters only to an app built directly (tests)
    run_loops: bool = Field(default=True, alias="GPUQ_RUN_LOOPS")
    # Prometheus that scrapes DCGM-Exporter, for real GPU utilization; unset: utilization is
    # reported unknown
    prometheus_url: str | None = Field(default=None, alias="GPUQ_PROMETHEUS_URL")
    # OIDC bearer JWTs (docs/security.md): the issuer (iss) to require; unset = OIDC off
    oidc_issuer: str | None = Field(default=None, alias="GPUQ_OIDC_ISSUER")
    # the audience (aud) to require; unset = gpuq
    oidc_audience: str | None = Field(default=None, alias="GPUQ_OIDC_AUDIENCE")
    # the identity provider's JWKS URL (keys cached 5 minutes)
    oidc_jwks_url: str | None = Field(default=None, alias="GPUQ_OIDC_JWKS_URL")
    # or a JWKS JSON file (read once at start)
    oidc_jwks_file: Path | None = Field(default=None, alias="GPUQ_OIDC_JWKS_FILE")
    # the JWT claim holding the user's groups
    oidc_groups_claim: str = Field(default="groups", alias="GPUQ_OIDC_GROUPS_CLAIM")
    # {"group": "admin" | "team:<name>" | "team:<name>:read"} as JSON; first match wins
    oidc_group_scopes: dict[str, str] = Field(
        default_factory=dict, alias="GPUQ_OIDC_GROUP_SCOPES"
    )
    db_pool_size: int = Field(
        default=10, ge=1, alias="GPUQ_DB_POOL_SIZE",
        description="pooled database connections kept open per process",
    )
    db_max_overflow: int = Field(
        default=10, ge=0, alias="GPUQ_DB_MAX_OVERFLOW",
        description="extra connections opened under load above the pool size",
    )
    db_pool_timeout_s: float = Field(
        default=3.0, gt=0, alias="GPUQ_DB_POOL_TIMEOUT",
        description="seconds a request waits for a free connection before a 503 with "
        "Retry-After (a request holds at most one connection at a time)",
    )
    db_connect_timeout_s: int = Field(
        default=5, ge=1, alias="GPUQ_DB_CONNECT_TIMEOUT",
        description="seconds to open a database connection (a database that does not "
        "answer is unavailable: 503)",
    )
    request_timeout_s: float = Field(
        default=30.0, ge=0, alias="GPUQ_REQUEST_TIMEOUT",
        description="seconds of database time one API request may use in all (its waits "
        "for a pooled connection and its statements, cut to what is left); a request past "
        "it answers 503 with Retry-After. Also each statement's limit in the dispatcher "
        "(PostgreSQL statement_timeout); 0 = no limit",
    )
    worker_threads: int = Field(
        default=40, ge=1, alias="GPUQ_WORKER_THREADS",
        description="threads serving the API's synchronous routes",
    )
    max_concurrent_requests: int = Field(
        default=40, ge=0, alias="GPUQ_MAX_CONCURRENT_REQUESTS",
        description="API requests in progress at once (one per worker thread by default); "
        "more wait up to GPUQ_BUSY_WAIT for one to end, then answer 503 with Retry-After. "
        "/healthz, /readyz and /metrics are not counted. 0 = no limit",
    )
    busy_wait_s: float = Field(
        default=3.0, gt=0, alias="GPUQ_BUSY_WAIT",
        description="seconds a request beyond GPUQ_MAX_CONCURRENT_REQUESTS waits for a "
        "slot before a 503 with Retry-After; every request answers within GPUQ_BUSY_WAIT + "
        "GPUQ_REQUEST_TIMEOUT seconds (plus its CPU time)",
    )
    loop_db_pool_size: int = Field(
        default=4, ge=0, alias="GPUQ_LOOP_DB_POOL_SIZE",
        description="database connections of the loops (dispatcher, descheduler, lease "
        "reaper, tuner) in a pool of their own, so API load never makes a pass wait for a "
        "connection; 0 = the loops share the API's pool",
    )
    team_max_pending: int = Field(
        default=10_000, ge=0, alias="GPUQ_TEAM_MAX_PENDING",
        description="jobs one team may have pending at once unless the team sets its own "
        "max_pending; a team token's submit past it answers 429 with Retry-After. 0 = no cap",
    )
    team_submit_rate: float = Field(
        default=100.0, ge=0, alias="GPUQ_TEAM_SUBMIT_RATE",
        description="jobs per second one team may submit, sustained, through each API process "
        "unless the team sets its own submit_rate; past it a team token's submit answers 429 "
        "with Retry-After. 0 = no limit",
    )
    team_submit_burst: int = Field(
        default=5_000, ge=1, alias="GPUQ_TEAM_SUBMIT_BURST",
        description="jobs a team may submit at once above its rate (one full "
        "POST /v1/jobs:batch by default)",
    )
    # the dashboard asks for a token unless an operator opens it read-only to everyone
    ui_public: bool = Field(default=False, alias="GPUQ_UI_PUBLIC")
    # estimated start times are recomputed when asked for and this old (a bounded forward
    # replay); a pending job queued since the last replay asks for one once it is 5 s old
    estimate_interval_s: float = Field(default=30.0, gt=0, alias="GPUQ_ESTIMATE_INTERVAL")

    @model_validator(mode="after")
    def _from_files(self) -> Settings:
        """DATABASE_URL_FILE / GPUQ_ADMIN_TOKEN_FILE: the secret from a mounted file (the
        manifests mount Secret gpuq-secrets read-only); a missing file stops the start
        with its name rather than running without the secret."""
        for field, path in (("database_url", self.database_url_file),
                            ("admin_token", self.admin_token_file)):
            if path is not None and getattr(self, field) is None:
                try:
                    value = path.read_text().strip()
                except OSError as e:
                    raise ValueError(f"cannot read {path} ({e.strerror})") from None
                if not value:
                    raise ValueError(f"{path} is empty")
                setattr(self, field, value)
        return self


def get_settings() -> Settings:
    """Read the settings now (never cached at import)."""
    return Settings()

"""Wiring of a gpuq process: database (external or embedded), schema check,
config, admin token, cluster and loops. ``gpuq serve``, ``gpuq api`` and
``gpuq dispatcher`` all start here; tests build :class:`Services` directly.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from importlib import resources
from pathlib import Path

from sqlalchemy import Engine, select
from sqlalchemy.orm import Session, sessionmaker

from app.clock import utcnow
from app.cluster import build_cluster
from app.cluster.base import Cluster
from app.cluster.k8s_settings import KubeSettings
from app.dispatch.base import LoopService
from app.dispatch.descheduler import Descheduler
from app.dispatch.leader import LeaderElector
from app.dispatch.leases import LeaseReaper
from app.dispatch.metrics import MeteredDispatcher
from app.dispatch.node_sync import gpu_type_configs
from app.dispatch.notify import NotifyListener
from app.dispatch.tuner import TunerLoop
from app.domain.config import GpuqConfig, load_config, load_config_text
from app.metrics import GpuqMetrics
from app.settings import Settings
from app.store import migrate
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.convert import node_info
from app.store.db import make_engine, make_session_factory, psycopg_conninfo
from app.store.embedded import EmbeddedPostgres, start_embedded
from app.store.orm import NodeRow
from app.store.tokens import ADMIN_PREFIX, new_token

log = logging.getLogger("gpuq")

ADMIN_TOKEN_FILE = "admin_token"


def demo_config_text() -> str:
    return resources.files("app").joinpath("config/demo.yaml").read_text()


def load_settings_config(settings: Settings) -> GpuqConfig:
    """GPUQ_CONFIG, or the demo config shipped in the package."""
    if settings.config_file:
        return load_config(settings.config_file)
    return load_config_text(demo_config_text())


def resolve_admin_token(settings: Settings, announce: Callable[[str], None] = print) -> str:
    """GPUQ_ADMIN_TOKEN, else the one kept in the data folder (generated and shown once)."""
    if settings.admin_token:
        return settings.admin_token
    path = Path(settings.data_dir) / ADMIN_TOKEN_FILE
    if path.exists():
        return path.read_text().strip()
    path.parent.mkdir(parents=True, exist_ok=True)
    token = new_token(ADMIN_PREFIX)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:  # another process (gpuq api next to gpuq dispatcher) won
        for _ in range(50):
            token = path.read_text().strip()
            if token:
                return token
            time.sleep(0.1)
        raise RuntimeError(f"{path} is empty; remove it to generate a new admin token") from None
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    announce(
        f"gpuq admin token (shown once, kept in {path}):\n  {token}\n  export GPUQ_TOKEN={token}"
    )
    return token


def resolve_database(settings: Settings) -> tuple[str, EmbeddedPostgres | None]:
    if settings.database_url:
        return settings.database_url, None
    emb = start_embedded(Path(settings.data_dir))
    return emb.url, emb


@dataclass
class Services:
    settings: Settings
    engine: Engine
    session_factory: sessionmaker[Session]
    cluster: Cluster | None
    clock: Callable[[], datetime]
    admin_token: str
    embedded: EmbeddedPostgres | None = None
    loops: list[LoopService] = field(default_factory=list)
    metrics: GpuqMetrics = field(default_factory=GpuqMetrics)
    listener: object | None = None
    _threads: list[threading.Thread] = field(default_factory=list)

    def start_loops(self) -> None:
        for loop in self.loops:
            self._threads.append(loop.start_in_thread())
        if self.loops and self.listener is None:
            url = self.engine.url.render_as_string(hide_password=False)
            # a new job wakes the dispatcher (its steps keep their own pace)
            self.listener = NotifyListener(psycopg_conninfo(url), self.loops)
            self._threads.append(self.listener.start_in_thread())

    def close(self) -> None:
        for loop in self.loops:
            loop.stop()
        if self.listener is not None:
            self.listener.stop()  # type: ignore[attr-defined]
        for t in self._threads:
            t.join(timeout=5)
        if self.cluster is not None:
            self.cluster.close()  # stop the Kubernetes informers
        self.engine.dispose()
        if self.embedded is not None:
            self.embedded.stop()


def open_services(
    settings: Settings,
    *,
    with_loops: bool = True,
    apply_file_config: bool = True,
    clock: Callable[[], datetime] = utcnow,
) -> Services:
    """Connect (starting embedded PostgreSQL if needed), check the schema, load config."""
    url, embedded = resolve_database(settings)
    engine = make_engine(url)
    try:
        if embedded is not None:
            migrate.upgrade(engine)  # embedded mode keeps its own schema current
        else:
            migrate.check_current(engine)
        session_factory = make_session_factory(engine)
        with session_factory() as session:
            ensure_priority_classes(session)
            if apply_file_config:
                apply_config(session, load_settings_config(settings))
            session.commit()
        admin_token = resolve_admin_token(settings)
        cluster = None
        metrics = GpuqMetrics()
        loops: list[LoopService] = []
        if with_loops:
            elector = None
            gpu_types: list = []
            with session_factory() as session:
                nodes = [node_info(r) for r in session.scalars(select(NodeRow))]
                if settings.cluster == "kubernetes":
                    gpu_types = gpu_type_configs(session)
            cluster = build_cluster(settings, nodes=nodes, clock=clock, gpu_types=gpu_types)
            max_retries = 0
            if settings.cluster == "kubernetes":
                # any number of dispatcher replicas: one leads (PostgreSQL advisory lock)
                elector = LeaderElector(url)
                max_retries = KubeSettings().max_retries
            dispatcher = MeteredDispatcher(
                session_factory,
                cluster,
                clock=clock,
                interval=settings.dispatch_interval_s,
                elector=elector,
                max_retries=max_retries,
                metrics=metrics,
            )
            # whatever decides runs in the dispatcher's one thread (its steps)
            dispatcher.add_step(
                Descheduler(dispatcher, interval=settings.descheduler_interval_s)
            )
            dispatcher.add_step(
                LeaseReaper(dispatcher, interval=settings.lease_reaper_interval_s)
            )
            dispatcher.add_step(TunerLoop(session_factory, clock=clock))
            loops.append(dispatcher)
    except BaseException:
        engine.dispose()
        if embedded is not None:
            embedded.stop()
        raise
    return Services(
        settings=settings,
        engine=engine,
        session_factory=session_factory,
        cluster=cluster,
        clock=clock,
        admin_token=admin_token,
        embedded=embedded,
        loops=loops,
        metrics=metrics,
    )

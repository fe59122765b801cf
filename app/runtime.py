"""Wiring of a gpuq process: database (external or embedded), schema check,
config, admin token, cluster and loops. ``gpuq serve``, ``gpuq api`` and
``gpuq dispatcher`` all start here; tests build :class:`Services` directly.
"""

from __future__ import annotations

import gc
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
from app.cluster.interface import Cluster
from app.cluster.k8s_settings import KubeSettings
from app.dispatch.descheduler_step import Descheduler
from app.dispatch.drain import Drainer
from app.dispatch.leader import LeaderElector
from app.dispatch.lease_reaper import LeaseReaper
from app.dispatch.loops import LoopService
from app.dispatch.metrics_loop import MeteredDispatcher
from app.dispatch.notify import NotifyListener
from app.domain.config import GpuqConfig, load_config, load_config_text
from app.domain.yaml_input import read_text_bounded
from app.metrics import GpuqMetrics
from app.settings import Settings
from app.store import migrate
from app.store.catalog_cache import pod_policy_reader
from app.store.config_loader import (
    any_catalog,
    apply_config,
    apply_managed_config,
    config_digest,
    ensure_priority_classes,
    last_applied,
    lock_config,
    remember_applied,
)
from app.store.convert import node_info
from app.store.db import make_engine, make_session_factory, psycopg_conninfo
from app.store.embedded import EmbeddedPostgres, start_embedded
from app.store.node_rows import gpu_type_configs
from app.store.orm import NodeRow
from app.store.tokens import ADMIN_PREFIX, new_token, seed_admin_token
from app.tuning.loop import TunerLoop

log = logging.getLogger("gpuq")

#: the garbage collector's young-generation threshold in a process that runs the loops
#: (CPython's default is 700 allocations; :func:`tune_collector`)
GC_YOUNG_THRESHOLD = 50_000


def tune_collector() -> None:
    """Collect the young generation every ``GC_YOUNG_THRESHOLD`` container allocations
    instead of every 700 (the older generations' thresholds stay).

    A dispatcher allocates in bursts of short-lived objects: each Pod watch event is
    decoded into a few hundred dicts and lists, each bind builds a Pod and its request,
    each pass reads job rows. Collected every 700 allocations, many of them were still
    alive at a young collection, moved to the old generations, and counted towards the
    full collections that scan the whole heap (the informers' caches, the queue picture):
    binding 4,000 Pods (bench/throughput_kube.py, 250 kwok Nodes) took 12 full
    collections, 3.6 of gpuq's 10.5 CPU s, the collector 4.2 s in all; with 50,000 it took
    0.7 s and none was full, gpuq 8.5 s. Reference counting still frees what has no
    cycle at once; what the young collections find waits longer, a few MB at most."""
    young, *older = gc.get_threshold()
    if young < GC_YOUNG_THRESHOLD:
        gc.set_threshold(GC_YOUNG_THRESHOLD, *older)

ADMIN_TOKEN_FILE = "admin_token"
# SIGTERM to exit: a pass in progress gets this long (Kubernetes' default grace is 30 s)
SHUTDOWN_TIMEOUT_S = 6.0


def demo_config_text() -> str:
    return resources.files("app").joinpath("config/demo.yaml").read_text()


def load_settings_config(settings: Settings) -> GpuqConfig:
    """GPUQ_CONFIG, or the demo config shipped in the package."""
    if settings.config_file:
        return load_config(settings.config_file)
    return load_config_text(demo_config_text())


#: Values that appear in examples and old manifests: never accepted as the admin token.
EXAMPLE_ADMIN_TOKENS = frozenset(
    {"change-me-admin-token", "change-me", "changeme", "admin", "admin-token", "secret"}
)
MIN_ADMIN_TOKEN_LENGTH = 32


class UnsafeAdminToken(ValueError):
    """``GPUQ_ADMIN_TOKEN`` is too short or a documented example value."""


def check_admin_token(token: str) -> str:
    if token.strip().lower() in EXAMPLE_ADMIN_TOKENS:
        raise UnsafeAdminToken(
            "GPUQ_ADMIN_TOKEN is an example value from the documentation; "
            "generate one: python -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if len(token) < MIN_ADMIN_TOKEN_LENGTH:
        raise UnsafeAdminToken(
            f"GPUQ_ADMIN_TOKEN has {len(token)} characters; at least "
            f"{MIN_ADMIN_TOKEN_LENGTH} are needed (or unset it: gpuq generates one)"
        )
    return token


def kept_admin_token_path(settings: Settings) -> Path | None:
    """The data folder's admin token file, when gpuq keeps one there (GPUQ_ADMIN_TOKEN
    unset and the file made by :func:`resolve_admin_token`), else None."""
    if settings.admin_token:
        return None
    path = Path(settings.data_dir) / ADMIN_TOKEN_FILE
    return path if path.exists() else None


def replace_kept_admin_token(settings: Settings, token: str) -> Path | None:
    """After a break-glass reset the kept file holds the new token: it is what
    ``make run``'s users and the README read (``cat .gpuq/admin_token``), and it held a
    revoked one. Written whole (0600, then renamed over the old file)."""
    path = kept_admin_token_path(settings)
    if path is None:
        return None
    new = path.with_name(path.name + ".new")
    fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(token + "\n")
    os.replace(new, path)
    return path


def resolve_admin_token(settings: Settings, announce: Callable[[str], None] = print) -> str:
    """GPUQ_ADMIN_TOKEN (refused when short or an example), else the one kept in
    the data folder (generated and shown once). Either only seeds the first admin
    token in the database; later ones come from POST /v1/tokens/{id}/rotate."""
    if settings.admin_token:
        return check_admin_token(settings.admin_token)
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
        f"gpuq admin token (shown once, kept in {path} until rotated):\n  {token}\n"
        f"  export GPUQ_TOKEN=$(cat {path})"
    )
    return token


def apply_startup_config(session: Session, settings: Settings, now: datetime) -> None:
    """``GPUQ_CONFIG`` is applied as the managing config file only when its content
    changed since the last apply (an admin's API change to an object the file does
    not manage survives every restart; one it manages is refused up front). Without
    it, the demo config seeds an empty database once. The caller commits."""
    lock_config(session)
    if settings.config_file is None:
        if not any_catalog(session):
            apply_config(session, load_config_text(demo_config_text()))
        return
    path = str(settings.config_file)
    text = read_text_bounded(path)
    digest = config_digest(text)
    if last_applied(session).get("sha256") == digest:
        log.info("config %s unchanged since its last apply: not applied again", path)
        return
    changes = apply_managed_config(
        session, load_config_text(text, source=path), path, actor=f"config:{path}", at=now
    )
    remember_applied(session, path, digest, now)
    done = [c for c in changes if c.action != "unchanged"]
    log.info("config %s applied: %d change(s)", path, len(done))
    for c in done:
        log.info("  %s", c.describe())


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
    admin_token_source: str = "GPUQ_ADMIN_TOKEN"
    loops: list[LoopService] = field(default_factory=list)
    metrics: GpuqMetrics = field(default_factory=GpuqMetrics)
    listener: object | None = None
    loop_engine: Engine | None = None  # the loops' own pool (GPUQ_LOOP_DB_POOL_SIZE)
    _threads: list[threading.Thread] = field(default_factory=list)

    def seed_admin_token(self) -> None:
        """The admin token this process was started with becomes the first admin
        token in the database, unless one was ever stored (then it is ignored:
        rotation through the API wins over the environment)."""
        with self.session_factory() as session:
            if seed_admin_token(session, self.admin_token, self.admin_token_source):
                session.commit()

    def health(self) -> list[str]:
        """Why this process should be restarted (empty: healthy): a loop stuck past
        GPUQ_PASS_DEADLINE, or a cluster view that stopped following the cluster."""
        problems: list[str] = []
        deadline = self.settings.pass_deadline_s
        if deadline > 0:
            for loop in self.loops:
                problems += loop.health(deadline)
        if self.cluster is not None and self.loops:
            problems += self.cluster.health()
        return problems

    def start_loops(self) -> None:
        for loop in self.loops:
            self._threads.append(loop.start_in_thread())
        if self.loops and self.listener is None:
            url = self.engine.url.render_as_string(hide_password=False)
            # a new job wakes the dispatcher (its steps keep their own pace)
            self.listener = NotifyListener(psycopg_conninfo(url), self.loops)
            self._threads.append(self.listener.start_in_thread())

    def stop(self) -> None:
        """Ask every loop and the NOTIFY listener to stop (returns at once; a
        pass in progress finishes). Safe from a signal handler."""
        for loop in self.loops:
            loop.stop()
        if self.listener is not None:
            self.listener.stop()  # type: ignore[attr-defined]

    def wait(self, timeout_s: float | None = None) -> bool:
        """Join the loop threads (all of them within ``timeout_s`` overall);
        True when every one has ended."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        for t in self._threads:
            while t.is_alive():
                left = 0.5 if deadline is None else min(0.5, deadline - time.monotonic())
                if left <= 0:
                    return False
                t.join(timeout=left)
        return True

    def close(self, timeout_s: float = SHUTDOWN_TIMEOUT_S) -> None:
        """Stop the loops, give a pass in progress ``timeout_s`` to end (the
        dispatcher releases its leader lock as its loop ends), then close the
        cluster and the database."""
        self.stop()
        if not self.wait(timeout_s):
            log.warning("loops still running after %.0f s; closing anyway", timeout_s)
        if self.cluster is not None:
            self.cluster.close()  # stop the Kubernetes informers
        if self.loop_engine is not None:
            self.loop_engine.dispose()
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
    loop_engine: Engine | None = None
    engine = make_engine(
        url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        pool_timeout_s=settings.db_pool_timeout_s,
        connect_timeout_s=settings.db_connect_timeout_s,
        statement_timeout_s=settings.request_timeout_s,
    )
    try:
        if embedded is not None:
            migrate.upgrade(engine)  # embedded mode keeps its own schema current
        else:
            migrate.check_compatible(engine)
        session_factory = make_session_factory(engine)
        with session_factory() as session:
            ensure_priority_classes(session)
            if apply_file_config:
                apply_startup_config(session, settings, clock())
            session.commit()
        admin_token = resolve_admin_token(settings)
        cluster = None
        metrics = GpuqMetrics()
        loops: list[LoopService] = []
        if with_loops:
            tune_collector()
            loop_sf = session_factory
            if settings.loop_db_pool_size > 0:
                # the loops' own connections: 200 API clients cannot make a pass or the
                # lease reaper wait for (and time out on) the API's pool
                loop_engine = make_engine(
                    url,
                    pool_size=settings.loop_db_pool_size,
                    max_overflow=0,
                    pool_timeout_s=max(settings.db_pool_timeout_s, 30.0),
                    connect_timeout_s=settings.db_connect_timeout_s,
                    statement_timeout_s=settings.request_timeout_s,
                )
                loop_sf = make_session_factory(loop_engine)
            elector = None
            gpu_types: list = []
            with loop_sf() as session:
                nodes = [node_info(r) for r in session.scalars(select(NodeRow))]
                if settings.cluster == "kubernetes":
                    gpu_types = gpu_type_configs(session)
            # the bind-time re-check reads each team's Pod policy from the catalog
            policies = pod_policy_reader(loop_sf, KubeSettings().install_policy())
            cluster = build_cluster(
                settings, nodes=nodes, clock=clock, gpu_types=gpu_types, pod_policy_for=policies
            )
            max_retries = 0
            if settings.cluster == "kubernetes":
                # any number of dispatcher replicas: one leads (PostgreSQL advisory lock)
                elector = LeaderElector(url)
                max_retries = KubeSettings().max_retries
            dispatcher = MeteredDispatcher(
                loop_sf,
                cluster,
                clock=clock,
                interval=settings.dispatch_interval_s,
                elector=elector,
                max_retries=max_retries,
                metrics=metrics,
                pass_deadline_s=settings.pass_deadline_s,
            )
            # whatever decides runs in the dispatcher's one thread (its steps)
            dispatcher.add_step(
                Descheduler(dispatcher, interval=settings.descheduler_interval_s)
            )
            dispatcher.add_step(
                LeaseReaper(dispatcher, interval=settings.lease_reaper_interval_s)
            )
            dispatcher.add_step(Drainer(dispatcher, interval=settings.lease_reaper_interval_s))
            dispatcher.add_step(TunerLoop(loop_sf, clock=clock))
            loops.append(dispatcher)
    except BaseException:
        engine.dispose()
        if loop_engine is not None:
            loop_engine.dispose()
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
        admin_token_source="GPUQ_ADMIN_TOKEN" if settings.admin_token else "generated",
        loop_engine=loop_engine,
    )

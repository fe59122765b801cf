"""A PostgreSQL database of a test's own (created, migrated, configured, dropped)."""

from __future__ import annotations

from collections.abc import Iterator

from app.domain.config import load_config_text
from app.store.config_loader import apply_config, ensure_priority_classes
from app.store.db import make_engine, make_session_factory
from tests.pg_server import own_database

#: One A100 type, a training pool guaranteed 16 cards' CU, team nlp (the k8s tests' world).
A100_TRAINING_CONFIG = """
gpu_types:
  - {name: a100-80g, memory_gb: 80, weight: 10, product: "NVIDIA-A100.*80GB"}
pools:
  - {name: training, gpu_types: [a100-80g], guaranteed: {a100-80g: 160}}
teams:
  - {name: nlp, pool: training, quota_units: 1000}
"""


def fresh_database(config_yaml: str) -> Iterator[str]:
    """A database of the test's own on the test server (tests/pg_server.py), migrated (a
    copy of the migrated template) and configured with ``config_yaml``; dropped
    afterwards."""
    with own_database("gpuq_k8s", migrated=True) as url:
        engine = make_engine(url, null_pool=True)
        with make_session_factory(engine)() as s:
            ensure_priority_classes(s)
            apply_config(s, load_config_text(config_yaml))
            s.commit()
        engine.dispose()
        yield url

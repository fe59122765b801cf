"""No silent skips: the terminal summary of tests/conftest.py names every skipped test
group (module and reason), and a plain run needs no TEST_DATABASE_URL for the
Kubernetes-backend tests (they run on the embedded PostgreSQL)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[2]


def test_a_skipped_group_is_named_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_terminal_summary  # noqa: F401\n"
    )
    (tmp_path / "test_probe.py").write_text(
        "import pytest\n"
        "pytestmark = pytest.mark.skipif(True, reason='no chromium here')\n"
        "def test_a(): pass\n"
        "def test_b(): pass\n"
    )
    (tmp_path / "test_runs.py").write_text("def test_c(): pass\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )
    assert "1 passed, 2 skipped" in r.stdout, r.stdout + r.stderr
    assert "skipped test groups" in r.stdout
    assert "SKIPPED test_probe.py: 2 test(s): no chromium here" in r.stdout


def test_the_workers_deselected_count_reaches_the_summary() -> None:
    """``make test`` runs two pytest-xdist workers. They deselect, the controller prints
    the summary: each worker's count travels in ``workeroutput`` (pytest_deselected ->
    pytest_testnodedown), and the summary names it (the hooks called as xdist calls them).
    Without this the 11 long fault runs left out were not named under two workers."""
    import tests.conftest as c

    worker = SimpleNamespace(workeroutput={})
    c.pytest_deselected([SimpleNamespace(config=worker)] * 11)
    c._WORKERS_DESELECTED.clear()
    c.pytest_testnodedown(SimpleNamespace(workeroutput=worker.workeroutput), None)
    c.pytest_testnodedown(SimpleNamespace(workeroutput=worker.workeroutput), None)
    lines: list[str] = []
    tr = SimpleNamespace(stats={}, section=lines.append, write_line=lines.append)
    config = SimpleNamespace(getoption=lambda name, default="": "not long_faults"
                             if name == "markexpr" else default)
    try:
        c.pytest_terminal_summary(tr, 0, config)
    finally:
        c._WORKERS_DESELECTED.clear()
    assert any(line.startswith("DESELECTED 11 test(s) by -m/-k 'not long_faults'")
               for line in lines), lines


def test_kubernetes_backend_tests_do_not_skip_without_a_database_url() -> None:
    for f in sorted((ROOT / "tests" / "integration").glob("test_k8s_*.py")):
        text = f.read_text()
        assert "skipif" not in text and "TEST_DATABASE_URL" not in text, f.name

"""The real-cluster and real-Slurm harnesses start their daemons with
:func:`dies_with_parent`: a test run killed by SIGKILL (a CI timeout, an operator) must not
leave etcd, the API server, Kueue or slurmctld running on the machine, which ``atexit``
cannot promise."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.realkube.control_plane import SETPRIV, dies_with_parent

PARENT = """
import subprocess, sys, time
from tests.realkube.control_plane import dies_with_parent
child = subprocess.Popen(dies_with_parent(["sleep", "120"]), start_new_session=True)
print(child.pid, flush=True)
time.sleep(120)
"""


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie counts as gone: it has exited)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def _comm(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except FileNotFoundError:
        return ""


def test_a_daemon_dies_when_its_starter_is_killed() -> None:
    if SETPRIV is None:
        pytest.skip("setpriv (util-linux) is not installed: daemons rely on atexit alone")
    parent = subprocess.Popen([sys.executable, "-c", PARENT], stdout=subprocess.PIPE,
                              text=True, cwd=Path(__file__).resolve().parents[2])
    child = int(parent.stdout.readline())
    # setpriv asks for the signal, then execs the daemon: before the exec the request
    # may not be made yet (a harness waits for its daemon to answer before going on)
    for _ in range(200):
        if _comm(child) == "sleep":
            break
        time.sleep(0.05)
    assert _comm(child) == "sleep"
    parent.send_signal(signal.SIGKILL)  # no atexit, no finally
    parent.wait(10)
    for _ in range(100):
        if not _alive(child):
            break
        time.sleep(0.05)
    else:
        os.kill(child, signal.SIGKILL)
        raise AssertionError(f"process {child} outlived the process that started it")


def test_without_setpriv_the_command_is_unchanged(monkeypatch) -> None:
    import tests.realkube.control_plane as cp

    monkeypatch.setattr(cp, "SETPRIV", None)
    assert cp.dies_with_parent(["etcd", "--x"]) == ["etcd", "--x"]
    assert dies_with_parent(["etcd"])[-1] == "etcd"

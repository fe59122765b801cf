"""`gpuq serve`, `gpuq api` and `gpuq dispatcher` refuse a weak GPUQ_ADMIN_TOKEN
before touching the database: a clear line on stderr and exit code 2."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest


@pytest.mark.parametrize("command", ["serve", "api", "dispatcher"])
@pytest.mark.parametrize("token", ["change-me-admin-token", "short-token"])
def test_weak_admin_token_refused_at_start(command: str, token: str, tmp_path) -> None:
    env = {**os.environ, "GPUQ_ADMIN_TOKEN": token, "GPUQ_DATA_DIR": str(tmp_path),
           "DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}
    r = subprocess.run([sys.executable, "-m", "app.cli", command], env=env,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert "GPUQ_ADMIN_TOKEN" in r.stderr
    assert "Traceback" not in r.stderr

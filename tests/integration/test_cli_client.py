"""The `gpuq` client commands against a running server (uvicorn on a free port)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.obs_env import ADMIN, seeded_env, serving

GPUQ = [sys.executable, "-m", "app.cli"]


@pytest.fixture(scope="module")
def server():
    with seeded_env() as env, serving(env.client.app) as url:
        yield env, url


def gpuq(url: str, *args: str, token: str | None = ADMIN, cwd: Path | None = None):
    env = {**os.environ, "GPUQ_URL": url, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("GPUQ_TOKEN", None)
    if token:
        env["GPUQ_TOKEN"] = token
    return subprocess.run(
        [*GPUQ, *args], capture_output=True, text=True, env=env, timeout=60, cwd=cwd
    )


JOB_YAML = """
name: cli-train
team: nlp
resources: {gpus: 1, gpu_types: [a100], cpu: 1, memory_gb: 1}
duration_estimate_s: 600
"""


def test_submit_list_show_queue_cancel_usage(server, tmp_path):
    env, url = server
    f = tmp_path / "job.yaml"
    f.write_text(JOB_YAML)
    r = gpuq(url, "submit", "-f", str(f))
    assert r.returncode == 0, r.stderr
    assert "submitted job" in r.stdout and "cli-train" in r.stdout and "pending" in r.stdout
    job_id = r.stdout.split("submitted job", 1)[1].split()[0]

    # a list of two in one file, one of them too big to run now (queues with a reason)
    two = tmp_path / "two.yaml"
    two.write_text(
        "- {name: cli-a, team: cv, resources: {gpus: 1, gpu_types: [v100]}}\n"
        "- {name: cli-big, team: nlp, resources: {gpus: 4, gpu_types: [v100]}}\n"
    )
    r = gpuq(url, "submit", "-f", str(two))
    assert r.returncode == 0 and r.stdout.count("submitted job") == 2, r.stderr

    r = gpuq(url, "queue")
    assert r.returncode == 0 and "3 pending" in r.stdout and "cli-train" in r.stdout

    env.advance(5)
    env.dispatch()
    env.dispatch()

    r = gpuq(url, "jobs", "--team", "nlp")
    assert r.returncode == 0, r.stderr
    assert "cli-train" in r.stdout and "cli-big" in r.stdout and "cli-a" not in r.stdout
    r = gpuq(url, "jobs", "-o", "json", "--status", "pending")
    assert r.returncode == 0 and '"items"' in r.stdout

    r = gpuq(url, "job", job_id)
    assert r.returncode == 0, r.stderr
    assert "cli-train" in r.stdout and "a100-0" in r.stdout  # its allocation

    r = gpuq(url, "usage")
    assert r.returncode == 0, r.stderr
    assert "a100" in r.stdout and "v100" in r.stdout and "unknown" in r.stdout
    r = gpuq(url, "usage", "--pool", "training")
    assert r.returncode == 0 and "guaranteed" in r.stdout, r.stderr
    r = gpuq(url, "usage", "--team", "nlp")
    assert r.returncode == 0 and "used" in r.stdout, r.stderr

    r = gpuq(url, "cancel", job_id)
    assert r.returncode == 0 and "cancelled" in r.stdout, r.stderr
    r = gpuq(url, "cancel", job_id)
    assert r.returncode == 1 and "already cancelled" in r.stderr


def test_clear_errors(server, tmp_path):
    env, url = server
    r = gpuq(url, "jobs", token="wrong")
    assert r.returncode == 1 and "401" in r.stderr and "token" in r.stderr
    r = gpuq(url, "jobs", token=None)
    assert r.returncode == 1 and "Authorization" in r.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: x\nteam: nlp\nresources: {gpus: -1}\n")
    r = gpuq(url, "submit", "-f", str(bad))
    assert r.returncode == 1 and "resources.gpus" in r.stderr
    r = gpuq(url, "submit", "-f", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = gpuq(url, "job", "999999")
    assert r.returncode == 1 and "404" in r.stderr
    r = gpuq("http://127.0.0.1:1", "queue")
    assert r.returncode == 2 and "cannot reach gpuq" in r.stderr
    # --url and --token flags win over the environment
    r = gpuq("http://127.0.0.1:1", "queue", "--url", url, "--token", ADMIN, token=None)
    assert r.returncode == 0, r.stderr


def test_tokens_create_list_rotate_revoke(server):
    _env, url = server
    r = gpuq(url, "tokens", "create", "team:nlp", "--name", "cli-bot", "--expires-in", "3600")
    assert r.returncode == 0, r.stderr
    assert "cli-bot (team:nlp)" in r.stdout
    first = r.stdout.strip().splitlines()[-1].strip()
    token_id = r.stdout.split("token ", 1)[1].split()[0]
    assert gpuq(url, "jobs", token=first).returncode == 0
    r = gpuq(url, "tokens", "list", "--team", "nlp")
    assert r.returncode == 0 and "cli-bot" in r.stdout and "active" in r.stdout, r.stderr
    r = gpuq(url, "tokens", "rotate", token_id)
    assert r.returncode == 0, r.stderr
    second = r.stdout.strip().splitlines()[-1].strip()
    new_id = r.stdout.split("token ", 1)[1].split()[0]
    assert gpuq(url, "jobs", token=first).returncode == 1  # 401 now
    assert gpuq(url, "jobs", token=second).returncode == 0
    r = gpuq(url, "tokens", "revoke", new_id)
    assert r.returncode == 0 and "revoked" in r.stdout, r.stderr
    r = gpuq(url, "jobs", token=second)
    assert r.returncode == 1 and "revoked" in r.stderr
    # team tokens do not manage tokens
    r = gpuq(url, "tokens", "list", token=second)
    assert r.returncode == 1

"""The `gpuq` client commands against a running server (uvicorn on a free port)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from tests.integration.obs_env import ADMIN, seeded_env, serving

GPUQ = [sys.executable, "-m", "app.cli"]


@pytest.fixture(scope="module")
def server():
    with seeded_env() as env, serving(env.client.app) as url:
        yield env, url


def gpuq(url: str, *args: str, token: str | None = ADMIN, cwd: Path | None = None,
         extra_env: dict[str, str] | None = None):
    env = {**os.environ, "GPUQ_URL": url, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb",
           **(extra_env or {})}
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
    assert r.returncode == 1 and "set GPUQ_TOKEN or pass --token" in r.stderr
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
    # the rotated and the revoked token stay as history: listed a page at a time
    r = gpuq(url, "tokens", "list", "--team", "nlp", "--limit", "1")
    assert r.returncode == 0 and "more: gpuq tokens list --team nlp --limit 1 --cursor" in (
        r.stdout), r.stdout
    cursor = r.stdout.split("--cursor", 1)[1].split()[0]
    r2 = gpuq(url, "tokens", "list", "--team", "nlp", "--limit", "1", "--cursor", cursor)
    assert r2.returncode == 0 and "cli-bot" in r2.stdout and "more:" not in r2.stdout, r2.stdout
    r = gpuq(url, "jobs", token=second)
    assert r.returncode == 1 and "revoked" in r.stderr
    # team tokens do not manage tokens
    r = gpuq(url, "tokens", "list", token=second)
    assert r.returncode == 1


def test_tokens_create_metrics_for_prometheus(server):
    """`gpuq tokens create metrics --name prometheus` (docs/observability.md): a token
    that scrapes /metrics and is refused by everything else. Fails on the old code
    (the scope did not exist: a 422)."""
    _env, url = server
    r = gpuq(url, "tokens", "create", "metrics", "--name", "prometheus")
    assert r.returncode == 0, r.stderr
    assert "prometheus (metrics)" in r.stdout
    token = r.stdout.strip().splitlines()[-1].strip()
    assert token.startswith("gpuqm_")
    auth = {"Authorization": f"Bearer {token}"}
    r = httpx.get(f"{url}/metrics", headers=auth, timeout=30)
    assert r.status_code == 200 and "gpuq_gpu_capacity_units" in r.text
    r = gpuq(url, "jobs", token=token)
    assert r.returncode == 1 and "metrics" in r.stderr, r.stderr
    r = gpuq(url, "tokens", "list")
    assert r.returncode == 0 and "metrics" in r.stdout, r.stderr


def one_error_line(r) -> str:
    """The whole of stderr: ONE line, ``gpuq: error: <detail>``."""
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuq: error: "), r.stderr
    assert "Traceback" not in r.stderr and "╭" not in r.stderr
    return lines[0]


def test_submit_list_is_one_all_or_nothing_batch(server, tmp_path):
    env, url = server
    before = len(env.get("/v1/jobs?limit=500")["items"])
    bad = tmp_path / "bad-list.yaml"  # the second job names a team that does not exist
    bad.write_text(
        "- {name: batch-ok, team: cv, resources: {gpus: 1, gpu_types: [v100]}}\n"
        "- {name: batch-bad, team: nosuchteam, resources: {gpus: 1, gpu_types: [v100]}}\n"
    )
    r = gpuq(url, "submit", "-f", str(bad))
    assert r.returncode == 1
    one_error_line(r)
    # one at a time would have created batch-ok before failing on batch-bad
    assert len(env.get("/v1/jobs?limit=500")["items"]) == before
    good = tmp_path / "list.yaml"
    good.write_text("jobs:\n" + "".join(
        f"  - {{name: batch-{i}, team: cv, resources: {{gpus: 1, gpu_types: [v100]}}}}\n"
        for i in range(3)))
    r = gpuq(url, "submit", "-f", str(good))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("submitted job") == 3 and "one batch" in r.stdout
    assert len(env.get("/v1/jobs?limit=500")["items"]) == before + 3
    r = gpuq(url, "submit", "-f", str(good), "--idempotency-key", "k1")
    assert r.returncode == 2 and "one all-or-nothing batch" in one_error_line(r)


def test_cursor_pages_through_jobs_and_queue(server, tmp_path):
    env, url = server
    f = tmp_path / "many.yaml"
    f.write_text("".join(
        f"- {{name: page-{i}, team: nlp, resources: {{gpus: 4, gpu_types: [v100]}}}}\n"
        for i in range(5)))  # no cycle runs here: they stay pending
    assert gpuq(url, "submit", "-f", str(f)).returncode == 0
    seen: list[str] = []
    args = ["jobs", "--team", "nlp", "--status", "pending", "--limit", "2"]
    for _ in range(10):
        r = gpuq(url, *args)
        assert r.returncode == 0, r.stderr
        seen += [n for n in (f"page-{i}" for i in range(5)) if n in r.stdout]
        if "more:" not in r.stdout:
            break
        more = r.stdout.split("more: gpuq ", 1)[1].split()
        assert more[:7] == ["jobs", "--team", "nlp", "--status", "pending", "--limit", "2"]
        assert more[7] == "--cursor"
        args = more[:9]
    assert sorted(seen) == [f"page-{i}" for i in range(5)]  # each page once, none lost
    r = gpuq(url, "queue", "--team", "nlp", "--limit", "3")
    assert r.returncode == 0 and "more: gpuq queue --team nlp --limit 3 --cursor" in r.stdout
    cursor = r.stdout.split("--cursor", 1)[1].split()[0]
    first = {n for n in (f"page-{i}" for i in range(5)) if n in r.stdout}
    r = gpuq(url, "queue", "--team", "nlp", "--limit", "3", "--cursor", cursor)
    assert r.returncode == 0, r.stderr
    second = {n for n in (f"page-{i}" for i in range(5)) if n in r.stdout}
    assert first and second and not first & second


def test_every_error_is_one_line(server, tmp_path):
    _env, url = server
    long_name = "x" * 60  # a detail longer than a narrow terminal
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"name: {long_name}\nteam: nlp\nresources: {{gpus: 1}}\nruntime_s: 5\n")
    narrow = {"COLUMNS": "40"}
    for args, code in (
        (("submit", "-f", str(bad)), 1),  # 422 from the server
        (("submit",), 2),  # usage: missing option
        (("jobs", "--limit", "x"), 2),  # usage: bad value
        (("nosuch",), 2),
        (("job", "999999"), 1),
    ):
        r = gpuq(url, *args, extra_env=narrow)
        assert r.returncode == code, (args, r.stderr)
        one_error_line(r)
    r = gpuq("http://127.0.0.1:1", "queue", extra_env=narrow)
    assert r.returncode == 2 and "cannot reach gpuq" in one_error_line(r)
    r = gpuq(url, "simulate", str(tmp_path / "missing.yaml"))
    assert r.returncode == 2 and "scenario file not found" in one_error_line(r)

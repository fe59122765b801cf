"""The CLI for daily work against a real server: idempotent submit, exit codes
scripts can trust, --wait / --watch / --follow, -o json|yaml, the team usage view, leases
with their state, and the no-token message."""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from tests.integration.obs_env import ADMIN, seeded_env, serving
from tests.integration.test_cli_client import GPUQ, gpuq


@pytest.fixture(scope="module")
def server():
    with seeded_env() as env, serving(env.client.app) as url:
        yield env, url


def _file(tmp_path, name: str, text: str):
    f = tmp_path / name
    f.write_text(text)
    return str(f)


ONE = "name: {n}\nteam: nlp\nresources: {{gpus: 1, gpu_types: [v100]}}\nduration_estimate_s: 60\n"


def test_submitting_the_same_file_twice_returns_the_first_job(server, tmp_path):
    _env, url = server
    f = _file(tmp_path, "j.yaml", ONE.format(n="idem"))
    a = gpuq(url, "submit", "-f", f, "-o", "json")
    assert a.returncode == 0, a.stderr
    b = gpuq(url, "submit", "-f", f)
    assert b.returncode == 0, b.stderr
    first = json.loads(a.stdout)["id"]
    assert f"already submitted: job {first}" in b.stdout and "--new" in b.stdout
    c = gpuq(url, "submit", "-f", f, "--new", "-o", "json")
    assert c.returncode == 0 and json.loads(c.stdout)["id"] != first
    # a changed file is another job
    f2 = _file(tmp_path, "j2.yaml", ONE.format(n="idem") + "priority: P2\n")
    d = gpuq(url, "submit", "-f", f2, "-o", "json")
    assert d.returncode == 0 and json.loads(d.stdout)["id"] not in (first,)
    # a list is one batch without a key, and the CLI says what a second run would do
    f3 = _file(tmp_path, "l.yaml", "- " + ONE.format(n="l1").replace("\n", "\n  ")
               + "\n- " + ONE.format(n="l2").replace("\n", "\n  "))
    e = gpuq(url, "submit", "-f", f3)
    assert e.returncode == 0 and "submitting this file again makes new jobs" in \
        " ".join(e.stdout.split()), e.stdout + e.stderr
    env, _ = server  # the two leave the v100s to the tests after this one
    auth = {"Authorization": f"Bearer {ADMIN}"}
    for j in env.client.get("/v1/jobs", headers=auth, params={"team": "nlp"}).json()["items"]:
        if j["name"] in ("l1", "l2"):
            assert env.client.post(f"/v1/jobs/{j['id']}/cancel", headers=auth).status_code \
                in (200, 202)


def test_unknown_filters_exit_non_zero_with_the_valid_names(server):
    _env, url = server
    r = gpuq(url, "jobs", "--team", "vision")
    assert r.returncode == 1 and "unknown team 'vision'" in r.stderr
    assert "known: cv, nlp" in r.stderr
    r = gpuq(url, "jobs", "--team", "NLP")
    assert r.returncode == 1 and "did you mean nlp?" in r.stderr
    r = gpuq(url, "jobs", "--pool", "trainin")
    assert r.returncode == 1 and "did you mean training?" in r.stderr
    # the queue too (it printed an empty queue and exited 0)
    r = gpuq(url, "queue", "--team", "vision")
    assert r.returncode == 1 and "unknown team 'vision'" in r.stderr, r.stderr
    r = gpuq(url, "queue", "--pool", "trainin", "--watch", "--count", "1")
    assert r.returncode == 1 and "did you mean training?" in r.stderr, r.stderr


def test_no_token_says_how_to_give_one(server):
    _env, url = server
    r = gpuq(url, "queue", token=None)
    assert r.returncode == 1 and "set GPUQ_TOKEN or pass --token" in r.stderr
    # a token the server does not take says where the token came from too
    r = gpuq(url, "queue", token="gpuqt_not-a-token")
    assert r.returncode == 1 and "401 Unauthorized" in r.stderr, r.stderr
    assert "check GPUQ_TOKEN or --token" in r.stderr, r.stderr


def test_submit_wait_returns_when_the_job_runs(server, tmp_path):
    env, url = server
    f = _file(tmp_path, "w.yaml", ONE.format(n="waiter"))
    p = subprocess.Popen([*GPUQ, "submit", "-f", f, "--wait", "--interval", "0.2",
                          "--timeout", "30", "--url", url, "--token", ADMIN],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(300):  # the CLI submits (a loaded machine starts Python slowly)
            items = env.client.get("/v1/jobs", headers={"Authorization": f"Bearer {ADMIN}"},
                                   params={"team": "nlp"}).json()["items"]
            if any(j["name"] == "waiter" for j in items):
                break
            time.sleep(0.1)
        time.sleep(0.5)
        assert p.poll() is None  # still waiting: nothing ran a cycle
        env.dispatch()
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 0, err
    assert "pending" in out and "running" in out.splitlines()[-1]


def test_wait_times_out_with_code_3(server, tmp_path):
    _env, url = server
    f = _file(tmp_path, "t.yaml", ONE.format(n="slowpoke"))
    r = gpuq(url, "submit", "-f", f, "--wait", "--timeout", "0.5", "--interval", "0.2")
    assert r.returncode == 3 and "still pending" in r.stderr


def test_queue_watch_redraws(server, tmp_path):
    _env, url = server
    r = gpuq(url, "queue", "--watch", "--count", "2", "--interval", "0.1")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("queue (") == 2


def test_job_events_and_follow(server, tmp_path):
    _env, url = server
    f = _file(tmp_path, "e.yaml", ONE.format(n="followed"))
    jid = json.loads(gpuq(url, "submit", "-f", f, "-o", "json").stdout)["id"]
    r = gpuq(url, "job", jid, "--events")
    assert r.returncode == 0 and "submitted" in r.stdout and "1 x 1 GPU(s) (v100" in r.stdout
    p = subprocess.Popen([*GPUQ, "job", jid, "--follow", "--interval", "0.2", "--timeout", "30",
                          "--url", url, "--token", ADMIN],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        time.sleep(1.0)
        assert gpuq(url, "cancel", jid).returncode == 0
        out, err = p.communicate(timeout=30)
    finally:
        p.kill()
    assert p.returncode == 1, err  # it ended, and not by succeeding
    assert "submitted" in out and "cancelled" in out


def test_every_client_command_speaks_json_and_yaml(server, tmp_path):
    _env, url = server
    f = _file(tmp_path, "o.yaml", ONE.format(n="formats"))
    for fmt, parse in (("json", json.loads), ("yaml", yaml.safe_load)):
        r = gpuq(url, "submit", "-f", f, "--new", "-o", fmt)
        assert r.returncode == 0, r.stderr
        jid = parse(r.stdout)["id"]
        r = gpuq(url, "job", jid, "--events", "-o", fmt)
        assert r.returncode == 0 and parse(r.stdout)["events"], r.stdout[:200]
        r = gpuq(url, "cancel", jid, "-o", fmt)
        assert r.returncode == 0 and parse(r.stdout)["status"] == "cancelled", r.stdout[:200]
        for args in (("nodes", "cordon", "v100-0"), ("nodes", "uncordon", "v100-0")):
            r = gpuq(url, *args, "-o", fmt)
            assert r.returncode == 0 and parse(r.stdout)["name"] == "v100-0", r.stdout[:200]
    for args in (("jobs",), ("queue",), ("usage",), ("usage", "--team", "nlp"),
                 ("usage", "--pool", "training"), ("tokens", "list"), ("job", jid),
                 ("nodes", "list")):
        for fmt, parse in (("json", json.loads), ("yaml", yaml.safe_load)):
            r = gpuq(url, *args, "-o", fmt)
            assert r.returncode == 0, (args, r.stderr)
            assert parse(r.stdout) is not None, (args, fmt, r.stdout[:200])
    r = gpuq(url, "jobs", "-o", "xml")
    assert r.returncode == 2 and "table, json, yaml" in r.stderr


def test_team_usage_shows_quota_per_type_and_in_total(server):
    _env, url = server
    r = gpuq(url, "usage", "--team", "nlp")
    assert r.returncode == 0, r.stderr
    assert "all types" in r.stdout and "1,000" in r.stdout or "1000" in r.stdout
    assert "pending" in r.stdout and "running" in r.stdout


def test_help_has_metavars_examples_and_fields():
    out = subprocess.run([*GPUQ, "submit", "--help"], capture_output=True, text=True).stdout
    assert "<bool>" not in out and "<str>" not in out
    assert "--file FILE" in out and "Examples:" in out and "min_gpu_memory_gb" in out
    out = subprocess.run([*GPUQ, "simulate", "--help"], capture_output=True, text=True).stdout
    assert "kueue" in out and "fgd" in out


def test_nodes_cordon_list_uncordon_through_a_real_server(server):
    _env, url = server
    r = gpuq(url, "nodes", "cordon", "a100-0", "--reason", "fan")
    assert r.returncode == 0 and "cordoned" in r.stdout and "fan" in r.stdout, r.stderr
    r = gpuq(url, "nodes", "list", "-o", "json")
    node = next(n for n in json.loads(r.stdout) if n["name"] == "a100-0")
    assert node["schedulable"] is False and node["cordon"]["reason"] == "fan"
    r = gpuq(url, "nodes", "list")
    assert r.returncode == 0 and "cordoned" in r.stdout
    r = gpuq(url, "nodes", "uncordon", "a100-0")
    assert r.returncode == 0 and "ready" in r.stdout, r.stderr
    r = gpuq(url, "nodes", "drain", "no-such-node")
    assert r.returncode != 0 and "no-such-node" in r.stderr


def test_job_shows_its_lease_with_its_state(server, tmp_path):
    # nlp's pool training has no v100 guarantee: a v100 job borrows inference's on a lease
    env, url = server
    auth = {"Authorization": f"Bearer {ADMIN}"}
    for j in env.client.get("/v1/jobs", headers=auth, params={"limit": 500}).json()["items"]:
        if j["status"] in ("pending", "admitted", "running"):  # the earlier tests' jobs
            assert env.client.post(f"/v1/jobs/{j['id']}/cancel", headers=auth).status_code \
                in (200, 202), j
    env.dispatch()
    f = _file(tmp_path, "b.yaml", ONE.format(n="borrower"))
    jid = json.loads(gpuq(url, "submit", "-f", f, "--new", "-o", "json").stdout)["id"]
    env.dispatch()
    r = gpuq(url, "job", jid)
    assert r.returncode == 0, r.stderr
    assert "training <- inference 4 CU of v100, active until" in " ".join(r.stdout.split()), \
        r.stdout
    assert gpuq(url, "cancel", jid).returncode == 0
    env.dispatch()
    r = gpuq(url, "job", jid)
    lease = json.loads(gpuq(url, "job", jid, "-o", "json").stdout)["lease"]
    assert lease["state"] != "active" and lease["ended_at"], lease
    text = " ".join(r.stdout.split())
    assert "active until" not in text and f"{lease['state']} at" in text, r.stdout

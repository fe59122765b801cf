"""The dashboard in headless Chromium: pages load, show the seeded cluster, no console errors.

Chromium is driven through chromedriver's W3C HTTP API with httpx (no
Selenium). Console messages come from chromedriver's browser log; a
control page that logs an error proves the check can fail.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import threading
import time

import httpx
import pytest
import uvicorn

from tests.integration.obs_env import free_port, job, seeded_env

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-dev-shm-usage",
]

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER),
    reason="Chromium/chromedriver not installed (.ci/run installs Debian chromium and "
    "chromium-driver; run `apt-get install chromium chromium-driver`)",
)


class Browser:
    """A minimal W3C WebDriver client."""

    def __init__(self, driver_url: str, profile: str) -> None:
        self.http = httpx.Client(base_url=driver_url, timeout=60)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": [*FLAGS, f"--user-data-dir={profile}"],
                    },
                    "goog:loggingPrefs": {"browser": "ALL"},
                }
            }
        }
        r = self.http.post("/session", json=caps)
        r.raise_for_status()
        self.sid = r.json()["value"]["sessionId"]

    def cmd(self, method: str, path: str, body: dict | None = None):
        r = self.http.request(method, f"/session/{self.sid}{path}", json=body)
        r.raise_for_status()
        return r.json()["value"]

    def open(self, url: str) -> None:
        self.cmd("POST", "/url", {"url": url})

    def js(self, script: str):
        return self.cmd("POST", "/execute/sync", {"script": script, "args": []})

    def text(self) -> str:
        return self.js("return document.body.innerText")

    def console(self) -> list[dict]:
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def close(self) -> None:
        try:
            self.http.delete(f"/session/{self.sid}")
        finally:
            self.http.close()


@pytest.fixture(scope="module")
def site():
    with seeded_env() as env:
        env.submit(job("train-a", "nlp", 2, "a100"))
        env.submit(job("serve-b", "cv", 1, "v100"))
        env.submit(job("train-wait", "nlp", 3, "a100"))  # waits: one whole A100 left
        env.advance(5)
        env.dispatch()
        port = free_port()
        srv = uvicorn.Server(
            uvicorn.Config(
                env.client.app, host="127.0.0.1", port=port, log_level="warning", lifespan="off"
            )
        )
        t = threading.Thread(target=srv.run, daemon=True)
        t.start()
        for _ in range(200):
            if srv.started:
                break
            time.sleep(0.05)
        try:
            yield f"http://127.0.0.1:{port}"
        finally:
            srv.should_exit = True
            t.join(timeout=10)


@pytest.fixture(scope="module")
def browser():
    port = free_port()
    proc = subprocess.Popen(
        [DRIVER, f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    profile = tempfile.mkdtemp(prefix="gpuq-chromium-")
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(200):
            try:
                if httpx.get(url + "/status", timeout=1).json()["value"]["ready"]:
                    break
            except (httpx.HTTPError, ValueError, KeyError):
                pass
            time.sleep(0.05)
        b = Browser(url, profile)
        try:
            yield b
        finally:
            b.close()
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        shutil.rmtree(profile, ignore_errors=True)


def errors(entries: list[dict]) -> list[dict]:
    return [e for e in entries if e.get("level") in ("SEVERE", "ERROR")]


def test_console_check_can_fail(browser):
    browser.console()  # drain
    browser.open("data:text/html,<script>console.error('boom')</script><p>x</p>")
    assert any("boom" in e["message"] for e in errors(browser.console()))


PAGES = [
    ("/ui", ["GPU types", "a100", "v100", "unknown", "Alerts"]),
    ("/ui/queue", ["Queue (1 pending)", "train-wait", "why it waits"]),
    ("/ui/queue?pool=inference", ["Queue (0 pending)", "the queue is empty"]),
    ("/ui/fairness?window_s=3600", ["window 1h00m", "nlp"]),
    ("/ui/pools", ["training", "inference", "guaranteed", "Active leases"]),
    ("/ui/fairness", ["Fairness", "Teams", "nlp", "cv", "wait P99"]),
    ("/ui/jobs", ["train-a", "serve-b", "train-wait", "running"]),
    ("/ui/jobs?team=cv", ["serve-b"]),
    ("/ui/tuning", ["Weight tuner", "recommend", "a100"]),
]


@pytest.mark.parametrize(("path", "expect"), PAGES, ids=[p for p, _ in PAGES])
def test_pages_load_with_data_and_no_console_errors(browser, site, path, expect):
    browser.console()  # drain whatever came before
    browser.open(site + path)
    assert browser.js("return document.readyState") == "complete"
    text = browser.text()
    for needle in expect:
        assert needle in text, f"{path}: {needle!r} not on the page"
    if path == "/ui/jobs?team=cv":
        assert "train-a" not in text
    # every page links to the API docs and refreshes itself
    assert browser.js("return !!document.querySelector('a[href=\"/docs\"]')")
    assert browser.js("return !!document.querySelector('meta[http-equiv=refresh]')")
    assert errors(browser.console()) == [], path


def test_job_detail_and_filter_form(browser, site):
    browser.open(site + "/ui/jobs")
    browser.js(
        "document.querySelector('select[name=status]').value='pending';"
        "document.querySelector('form.filters').submit();"
    )
    for _ in range(100):
        if "status=pending" in browser.cmd("GET", "/url"):
            break
        time.sleep(0.05)
    text = browser.text()
    assert "train-wait" in text and "train-a" not in text
    href = browser.js("return document.querySelector('#jobs tbody a').getAttribute('href')")
    browser.open(site + href)
    text = browser.text()
    assert "train-wait" in text and "History" in text and "submitted" in text
    assert errors(browser.console()) == []

"""The dashboard in headless Chromium: pages load, show the seeded cluster, no console errors.

Chromium is driven through chromedriver's W3C HTTP API with httpx (no
Selenium). Console messages come from chromedriver's browser log; a
control page that logs an error proves the check can fail.
"""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
import tempfile
import time
import zlib
from base64 import b64decode
from contextlib import contextmanager

import httpx
import pytest

from tests.integration.obs_env import ADMIN, AUTH, free_port, job, seeded_env, serving

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

    def __init__(self, driver_url: str, profile: str, extra_args: list[str] = ()) -> None:
        self.http = httpx.Client(base_url=driver_url, timeout=60)
        caps = {
            "capabilities": {
                "alwaysMatch": {
                    "browserName": "chrome",
                    "goog:chromeOptions": {
                        "binary": CHROMIUM,
                        "args": [*FLAGS, *extra_args, f"--user-data-dir={profile}"],
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

    def screenshot(self) -> bytes:
        return b64decode(self.cmd("GET", "/screenshot"))

    def wait_url(self, fragment: str) -> str:
        for _ in range(200):
            url = self.cmd("GET", "/url")
            if fragment in url:
                return url
            time.sleep(0.05)
        raise AssertionError(f"never reached a URL with {fragment!r} (at {url})")

    def login(self, site: str, token: str) -> None:
        """Through the dashboard's own form, as a person would."""
        self.open(site + "/ui/login")
        self.js(
            f"document.getElementById('token').value={token!r};"
            "document.querySelector('form.login').submit();"
        )
        self.wait_url("/ui")
        for _ in range(100):
            if self.js("return document.readyState") == "complete" and "/login" not in self.cmd(
                "GET", "/url"
            ):
                return
            time.sleep(0.05)
        raise AssertionError("login did not leave the login page")

    def console(self) -> list[dict]:
        return self.cmd("POST", "/se/log", {"type": "browser"})

    def close(self) -> None:
        try:
            self.http.delete(f"/session/{self.sid}")
        finally:
            self.http.close()


SITE_TOKENS: dict[str, str] = {}


@pytest.fixture(scope="module")
def site():
    with seeded_env() as env:
        env.submit(job("train-a", "nlp", 2, "a100"))
        env.submit(job("serve-b", "cv", 1, "v100"))
        env.submit(job("train-wait", "nlp", 3, "a100"))  # waits: one whole A100 left
        env.advance(5)
        env.dispatch()
        r = env.client.post("/v1/teams/nlp/tokens", headers=AUTH)
        assert r.status_code == 201, r.text
        SITE_TOKENS["nlp"] = r.json()["token"]
        with serving(env.client.app) as url:
            yield url


@contextmanager
def chromium(extra_args: list[str] = ()):
    """chromedriver on a free port and one browser session (1280x900) on it."""
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
        b = Browser(url, profile, extra_args)
        try:
            b.cmd("POST", "/window/rect", {"width": 1280, "height": 900})
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


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


def errors(entries: list[dict]) -> list[dict]:
    return [e for e in entries if e.get("level") in ("SEVERE", "ERROR")]


def test_console_check_can_fail(browser):
    browser.console()  # drain
    browser.open("data:text/html,<script>console.error('boom')</script><p>x</p>")
    assert any("boom" in e["message"] for e in errors(browser.console()))


def png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and RGB(A) rows of a PNG (8-bit, no interlace: what Chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    pos, idat, width = 8, b"", 0
    height = bpp = 0
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6), (depth, colour)
            bpp = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows, prev = zlib.decompress(idat), width * bpp, [], bytearray(width * bpp)
    for y in range(height):
        f, line = (
            raw[y * (stride + 1)],
            bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)]),
        )
        for x in range(stride):
            a = line[x - bpp] if x >= bpp else 0
            b, c = prev[x], prev[x - bpp] if x >= bpp else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        rows.append(bytes(line))
        prev = line
    return width, height, [bytes(r[i] for i in range(len(r)) if i % bpp < 3) for r in rows]


def check_screenshot(png: bytes, name: str) -> None:
    """The page was painted: the dark header band on top, a light page below, and enough
    distinct colours (text, tables, bars) that it is not blank. Kept in GPUQ_SCREENSHOTS."""
    import os

    folder = os.environ.get("GPUQ_SCREENSHOTS")
    if folder:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{name}.png"), "wb") as f:
            f.write(png)
    width, height, rows = png_pixels(png)
    assert width >= 800 and height >= 400, (width, height)
    top = rows[5][:3]
    assert top == bytes((0x1D, 0x23, 0x30)), f"{name}: header colour {top.hex()}"
    colours = {row[x : x + 3] for row in rows[::7] for x in range(0, len(row), 21)}
    assert len(colours) >= 12, f"{name}: only {len(colours)} colours: blank page?"


PAGES = [
    ("/ui", ["GPU types", "a100", "v100", "unknown", "Alerts", "admin"]),
    ("/ui/queue", ["Queue (1 pending)", "train-wait", "why it waits", "estimated start"]),
    ("/ui/queue?pool=inference", ["Queue (0 pending)", "the queue is empty"]),
    ("/ui/teams", ["Teams", "nlp", "cv", "dominant share", "borrowed CU", "wait P99"]),
    ("/ui/nodes", ["a100-0", "v100-0", "3g.40gb: free", "train-a", "serve-b"]),
    ("/ui/fairness?window_s=3600", ["window 1h00m", "nlp"]),
    ("/ui/pools", ["training", "inference", "guaranteed", "Active leases"]),
    ("/ui/fairness", ["Fairness", "Teams", "nlp", "cv", "wait P99"]),
    ("/ui/jobs", ["train-a", "serve-b", "train-wait", "running"]),
    ("/ui/jobs?team=cv", ["serve-b"]),
    ("/ui/tuning", ["Weight tuner", "recommend", "a100"]),
    ("/ui/history", ["History", "Queue depth", "CU allocated per GPU type", "Wait per team"]),
]


def test_pages_need_a_token(browser, site):
    browser.cmd("DELETE", "/cookie")
    browser.open(site + "/ui/teams")
    assert "/ui/login" in browser.wait_url("/ui/login")
    assert "API token" in browser.text()
    check_screenshot(browser.screenshot(), "login")
    assert errors(browser.console()) == []


@pytest.mark.parametrize(("path", "expect"), PAGES, ids=[p for p, _ in PAGES])
def test_pages_load_with_data_and_no_console_errors(browser, site, path, expect):
    browser.login(site, ADMIN)
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
    # the stylesheet loaded (the header is dark, not the browser's default)
    assert browser.js("return getComputedStyle(document.querySelector('header')).display") == "flex"
    check_screenshot(browser.screenshot(), path.strip("/").replace("/", "-").replace("?", "-"))
    assert errors(browser.console()) == [], path


def test_job_detail_and_filter_form(browser, site):
    browser.login(site, ADMIN)
    browser.open(site + "/ui/jobs")
    browser.js(
        "document.querySelector('select[name=status]').value='pending';"
        "document.querySelector('form.filters').submit();"
    )
    browser.wait_url("status=pending")
    text = browser.text()
    assert "train-wait" in text and "train-a" not in text
    href = browser.js("return document.querySelector('#jobs tbody a').getAttribute('href')")
    browser.open(site + href)
    text = browser.text()
    assert "train-wait" in text and "History" in text and "submitted" in text
    assert errors(browser.console()) == []


def test_team_token_sees_its_jobs_and_cancels_with_the_button(browser, site):
    browser.cmd("DELETE", "/cookie")
    browser.login(site, SITE_TOKENS["nlp"])
    browser.open(site + "/ui/jobs")
    text = browser.text()
    assert "team nlp" in text and "train-wait" in text and "serve-b" not in text
    browser.open(site + "/ui/jobs")
    browser.js(
        "document.querySelector('select[name=status]').value='pending';"
        "document.querySelector('form.filters').submit();"
    )
    browser.wait_url("status=pending")
    href = browser.js("return document.querySelector('#jobs tbody a').getAttribute('href')")
    browser.open(site + href)
    assert "cancel this job" in browser.text()
    check_screenshot(browser.screenshot(), "job-cancel")
    browser.js("document.querySelector('#cancel button').click()")
    browser.cmd("POST", "/alert/accept", {})  # the "Cancel job ...?" confirmation
    browser.wait_url("cancelled=1")
    text = browser.text()
    assert "cancel requested" in text and "cancelled" in text
    assert "cancel this job" not in text
    assert errors(browser.console()) == []
    # log out: the cookie is gone, the next page asks for a token again
    browser.js("document.querySelector('#who form').submit()")
    browser.wait_url("/ui/login")
    browser.open(site + "/ui/jobs")
    assert "/ui/login" in browser.wait_url("/ui/login")


def test_history_charts_are_drawn_from_the_jobs(browser, site):
    """The vendored uPlot draws the three pictures off-line, from the page's own data:
    one waiting job now, the running jobs' CU per GPU type, each team's waits."""
    browser.login(site, ADMIN)
    browser.console()
    browser.open(site + "/ui/history")
    for _ in range(100):
        if browser.js("return document.querySelectorAll('.chart canvas').length") == 3:
            break
        time.sleep(0.05)
    assert browser.js("return document.querySelectorAll('.chart canvas').length") == 3
    labels = browser.js(
        "return document.getElementById('chart-allocated').chart.series.map(s => s.label)")
    assert "a100" in labels and "v100" in labels, labels
    last = browser.js("var d = document.getElementById('chart-queue').chart.data;"
                      "return d[1][d[1].length - 1]")
    pending = httpx.get(site + "/v1/queue", headers=AUTH).json()
    assert last == len(pending.get("items", pending) if isinstance(pending, dict) else pending)
    cu = browser.js("var d = document.getElementById('chart-allocated').chart.data;"
                    "return d.slice(1).map(s => s[s.length - 1])")
    assert sum(cu) > 0, cu
    text = browser.text()
    assert "nlp P50" in text and "cv P99" in text, text[-500:]
    assert errors(browser.console()) == []
    check_screenshot(browser.screenshot(), "ui-history")


def test_job_page_shows_the_request_and_the_placement(browser, site):
    browser.login(site, ADMIN)
    browser.open(site + "/ui/jobs?team=nlp")
    href = browser.js(
        "return [...document.querySelectorAll('#jobs tbody tr')]"
        ".find(r => r.cells[1].textContent.trim() == 'train-a')"
        ".querySelector('a').getAttribute('href')")
    browser.open(site + href)
    request = browser.js("return document.getElementById('request').innerText")
    placement = browser.js("return document.getElementById('placement').innerText")
    assert "1 x 2 GPU(s) (a100" in request, request
    assert placement.startswith("a100 on a100-0"), placement
    assert errors(browser.console()) == []


def test_teams_page_shows_shares_as_shares(browser, site):
    browser.login(site, ADMIN)
    browser.open(site + "/ui/teams")
    shares = browser.js(
        "return [...document.querySelectorAll('#teams td.share')].map(td => td.innerText)")
    # a percentage of one GPU type's capacity, and which type (not "CU over weight": 64)
    assert shares and all(re.fullmatch(r"\d+%( (a100|v100))?", s) for s in shares), shares
    assert any(s.endswith(("a100", "v100")) for s in shares), shares
    # a type without its own quota says what limits it (the team's total), not "-"
    text = browser.text()
    assert "in the total" in text, text[:800]

"""/docs in headless Chromium with every host but 127.0.0.1 unreachable: Swagger UI
renders the operations from the assets gpuq ships, and nothing is fetched elsewhere."""

from __future__ import annotations

import time

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.e2e.test_ui_chromium import CHROMIUM, DRIVER, Browser, chromium, errors
from tests.integration.obs_env import serving

pytestmark = pytest.mark.skipif(
    not (CHROMIUM and DRIVER), reason="Chromium/chromedriver not installed"
)

# every name resolves to nothing, except the test server's address
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1"


@pytest.fixture(scope="module")
def api_url():
    with serving(create_app(Settings(GPUQ_RUN_LOOPS=False))) as url:  # /docs needs no database
        yield url


@pytest.fixture(scope="module")
def offline_browser():
    with chromium([OFFLINE]) as b:
        yield b


def wait_for(browser: Browser, script: str, timeout_s: float = 30.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = browser.js(script)
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for: {script}")


def test_the_network_really_is_blocked(offline_browser):
    with pytest.raises(httpx.HTTPStatusError) as e:
        offline_browser.open("https://cdn.jsdelivr.net/npm/swagger-ui-dist@5/swagger-ui.css")
    assert "ERR_NAME_NOT_RESOLVED" in e.value.response.text


def test_swagger_ui_shows_the_operations_offline(offline_browser, api_url):
    b = offline_browser
    b.console()
    b.open(api_url + "/docs")
    count = wait_for(b, "return document.querySelectorAll('.opblock').length")
    assert count >= 30
    text = b.text()
    for needle in ("/v1/jobs", "/v1/queue", "/v1/teams/{name}/quota", "POST"):
        assert needle in text, needle
    resources = b.js("return performance.getEntriesByType('resource').map(e => e.name)")
    assert resources and all(r.startswith(api_url) for r in resources), resources
    assert errors(b.console()) == []


def test_redoc_renders_offline(offline_browser, api_url):
    b = offline_browser
    b.console()
    b.open(api_url + "/redoc")
    wait_for(b, "return document.querySelectorAll('[data-section-id]').length > 10")
    assert "/v1/jobs" in b.text()
    resources = b.js("return performance.getEntriesByType('resource').map(e => e.name)")
    # ReDoc's "API docs by Redocly" footer image is the one thing it asks a CDN for: it
    # fails off-line and the reference renders without it
    outside = [r for r in resources if not r.startswith((api_url, "blob:"))]
    assert all(r.startswith("https://cdn.redoc.ly/") and r.endswith(".svg") for r in outside)
    # the schema reads cleanly: ReDoc logged "Incompatible types in allOf" for every
    # one-of-four resources branch ({"type": "null"} merged with anyOf [number, null])
    time.sleep(1.0)
    logged = [e["message"] for e in b.console() if e.get("level") in ("WARNING", "SEVERE")]
    assert not [m for m in logged if "redoc.standalone.js" in m], logged[:3]


def test_redoc_health_samples_are_real(offline_browser, api_url):
    b = offline_browser
    b.open(api_url + "/redoc#tag/health/operation/healthz_healthz_get")
    wait_for(b, "return document.querySelectorAll('[data-section-id]').length > 10")
    text = wait_for(b, "var s = document.querySelector("
                       "'[data-section-id=\"operation/healthz_healthz_get\"]');"
                       "return s && s.innerText.includes('status') && s.innerText")
    assert "property1" not in text and '"ok"' in text, text[-400:]

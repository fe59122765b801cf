"""Real GPU utilization through a Prometheus HTTP API (a local stand-in server), or "unknown"."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import pytest

from tests.integration.obs_env import AUTH, free_port, seeded_env

RESULT = [
    {"metric": {"Hostname": "a100-0", "gpu": "0"}, "value": [0, "90"]},
    {"metric": {"Hostname": "a100-0", "gpu": "1"}, "value": [0, "30"]},
    {"metric": {"kubernetes_node": "v100-0", "gpu": "0"}, "value": [0, "5"]},
]


class PromHandler(BaseHTTPRequestHandler):
    queries: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server API
        u = urlparse(self.path)
        if u.path != "/api/v1/query":
            self.send_response(404)
            self.end_headers()
            return
        PromHandler.queries.append(parse_qs(u.query)["query"][0])
        body = json.dumps(
            {"status": "success", "data": {"resultType": "vector", "result": RESULT}}
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def prometheus():
    srv = ThreadingHTTPServer(("127.0.0.1", free_port()), PromHandler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


def test_dcgm_utilization_per_type(prometheus):
    with seeded_env(prometheus_url=prometheus) as env:
        rep = env.get("/v1/reports/utilization")
        util = {r["gpu_type"]: r["gpu_util"] for r in rep["gpu_types"]}
        assert util["a100"] == pytest.approx(0.6) and util["v100"] == pytest.approx(0.05)
        assert rep["gpu_util_source"] == prometheus and rep["gpu_util_note"] is None
        assert any("DCGM_FI_DEV_GPU_UTIL" in q for q in PromHandler.queries)
        text = env.client.get("/metrics", headers=AUTH).text
        assert 'gpuq_gpu_utilization_ratio{gpu_type="a100"} 0.6' in text
        assert "gpuq_gpu_utilization_known 1.0" in text


def test_unreachable_prometheus_says_unknown():
    dead = f"http://127.0.0.1:{free_port()}"
    with seeded_env(prometheus_url=dead) as env:
        rep = env.get("/v1/reports/utilization")
        assert all(r["gpu_util"] is None for r in rep["gpu_types"])
        assert "did not answer" in rep["gpu_util_note"]
        assert "gpuq_gpu_utilization_known 0.0" in env.client.get("/metrics", headers=AUTH).text

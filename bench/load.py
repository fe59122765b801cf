"""200 concurrent API clients against ``gpuq serve`` (API and loops in one process):
the concurrency bound and the loops' own pool against the old setup, in one run.

Before the bound, at 200 clients gpuq had throughput at half of 20 clients', P99 13.3 s, a
503 after 19.5 s though one is promised after the 3 s pool timeout, reset
connections, and failed dispatcher passes (the loops shared the API's pool). Here
two servers are started in turn on one fresh database each:

- ``old``: ``GPUQ_MAX_CONCURRENT_REQUESTS=0`` (no bound) and
  ``GPUQ_LOOP_DB_POOL_SIZE=0`` (one pool), what gpuq did before;
- ``new``: the defaults (40 requests in progress, a 3 s wait, 4 loop connections).

Each is driven by 20 and then 200 keep-alive clients for ``--seconds``, every client
cycling through a submit, its job, the team's job list and the queue (a team
token). Printed per case: answers per second, their status codes, errors (reset or
refused connections, answers over 60 s), P50/P99/max latency, and the loops'
failed passes/steps counted in the server's log. The bound to compare ``max``
against: ``GPUQ_BUSY_WAIT`` + ``GPUQ_REQUEST_TIMEOUT`` = 33 s.

    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/test \\
        .venv/bin/python bench/load.py [--seconds 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from bench.api import ADMIN, AUTH, free_port, pct  # noqa: E402
from bench.dispatch import database  # noqa: E402
from bench.history import load  # noqa: E402

# this checkout's gpuq (not whichever one the venv's `gpuq` script was installed from)
GPUQ = [sys.executable, "-c", "import sys; from app.cli import main; sys.argv[0] = 'gpuq'; main()"]
# the loops' failures (the API's own metrics pass is not a loop of the dispatcher)
LOOP_FAILED = re.compile(r"gpuq\.loops\.(dispatcher|descheduler|lease-reaper|tuner)\b.* failed;")
SETUPS = {
    "old": {"GPUQ_MAX_CONCURRENT_REQUESTS": "0", "GPUQ_LOOP_DB_POOL_SIZE": "0"},
    "new": {},
}
ANSWER_TIMEOUT_S = 60.0


def request(method: str, path: str, token: str, body: dict | None = None) -> bytes:
    data = json.dumps(body).encode() if body is not None else b""
    head = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1", f"Authorization: Bearer {token}",
            f"Content-Length: {len(data)}"]
    if body is not None:
        head.append("Content-Type: application/json")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + data


async def client(port: int, token: str, n: int, until: float, lat: list[float],
                 codes: Counter, errors: Counter) -> None:
    """One keep-alive connection cycling through four requests; reconnects after an
    error (counted by kind)."""
    reader = writer = None
    i, last_job = 0, 1
    while time.perf_counter() < until:
        step = i % 4
        if step == 0:
            req = request("POST", "/v1/jobs", token, {
                "name": f"load-{n}-{i}", "team": "nlp", "duration_estimate_s": 30,
                "resources": {"gpus": 1, "gpu_types": ["a100-80g"]}})
        elif step == 1:
            req = request("GET", f"/v1/jobs/{last_job}", token)
        elif step == 2:
            req = request("GET", "/v1/jobs?team=nlp&limit=20", token)
        else:
            req = request("GET", "/v1/queue?limit=50", token)
        i += 1
        t0 = time.perf_counter()
        try:
            if writer is None:
                reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(req)
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), ANSWER_TIMEOUT_S)
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            payload = await reader.readexactly(length)
        except (ConnectionError, asyncio.IncompleteReadError, OSError) as e:
            errors[type(e).__name__] += 1
            writer = None
            continue
        except TimeoutError:
            errors["over 60 s"] += 1
            writer.close()
            writer = None
            continue
        lat.append(time.perf_counter() - t0)
        codes[status] += 1
        if step == 0 and status == 201:
            last_job = json.loads(payload)["id"]
        if b"connection: close" in head.lower():
            writer.close()
            writer = None
    if writer is not None:
        writer.close()


def drive(port: int, token: str, clients: int, seconds: float) -> dict:
    lat: list[float] = []
    codes: Counter = Counter()
    errors: Counter = Counter()

    async def run() -> None:
        until = time.perf_counter() + seconds
        await asyncio.gather(*(client(port, token, n, until, lat, codes, errors)
                               for n in range(clients)))

    t0 = time.perf_counter()
    asyncio.run(run())
    wall = time.perf_counter() - t0
    return {"rate": sum(codes.values()) / wall, "codes": codes, "errors": errors, "lat": lat}


def serve(url: str, setup: dict[str, str], port: int, log: Path) -> subprocess.Popen:
    env = {**os.environ, "DATABASE_URL": url, "GPUQ_ADMIN_TOKEN": ADMIN, "GPUQ_PORT": str(port),
           "GPUQ_DATA_DIR": tempfile.mkdtemp(prefix="gpuq-load-"), "GPUQ_SIM_SPEED": "10",
           **setup}
    subprocess.run([*GPUQ, "db", "upgrade"], cwd=ROOT, check=True, env=env,
                   stdout=subprocess.DEVNULL)
    proc = subprocess.Popen([*GPUQ, "serve"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=log.open("w"),
                            start_new_session=True)
    deadline = time.monotonic() + 90
    while True:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=1).status_code == 200:
                return proc
        except httpx.HTTPError:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(log.read_text()[-2000:])
        time.sleep(0.3)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0, help="length of one case")
    ap.add_argument("--clients", default="20,200", help="client counts, comma-separated")
    args = ap.parse_args()
    counts = [int(c) for c in args.clients.split(",")]
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; before: {load()}")
    print("\n| setup | clients | answers/s | status codes | errors | P50 s | P99 s | max s "
          "| loop passes failed |")
    print("|---|---:|---:|---|---|---:|---:|---:|---:|")
    rows = []
    for name, setup in SETUPS.items():
        with database() as url:
            port = free_port()
            log = Path(tempfile.mkdtemp(prefix="gpuq-load-log-")) / "serve.log"
            proc = serve(url, setup, port, log)
            try:
                with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=AUTH) as c:
                    r = c.post("/v1/teams/nlp/tokens", json={})
                    r.raise_for_status()
                    token = r.json()["token"]
                drive(port, token, 8, 2.0)  # warm up
                for n in counts:
                    before = len(LOOP_FAILED.findall(log.read_text()))
                    res = drive(port, token, n, args.seconds)
                    failed = len(LOOP_FAILED.findall(log.read_text())) - before
                    rows.append((name, n, res, failed))
                    codes = ", ".join(f"{k}: {v}" for k, v in sorted(res["codes"].items()))
                    errs = ", ".join(f"{k}: {v}" for k, v in res["errors"].items()) or "none"
                    lat = res["lat"]
                    print(f"| {name} | {n} | {res['rate']:.0f} | {codes} | {errs} "
                          f"| {pct(lat, 50):.2f} | {pct(lat, 99):.2f} | {max(lat):.2f} "
                          f"| {failed} |", flush=True)
            finally:
                os.killpg(proc.pid, signal.SIGTERM)
                proc.wait(timeout=30)
    print(f"\nafter: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

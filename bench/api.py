"""Submit throughput: gpuq against a bare FastAPI endpoint, in the same run.

Two servers run side by side as separate processes under the same uvicorn
settings: ``gpuq api`` (the REST API without the dispatcher, on a fresh
database migrated and loaded with the demo config) and ``bench/bare_app.py``
(sync FastAPI endpoints that parse the same pydantic bodies and touch no
database). A small asyncio HTTP/1.1 client with keep-alive connections (cheap
enough not to be the bottleneck) drives them in alternating rounds of
``--seconds`` each, so both see the same machine load:

- single submit, ``POST /v1/jobs`` with a team token, at 8 and 32 concurrent
  connections: jobs/s, P50 and P99 latency, ratio gpuq / bare;
- batch submit, ``POST /v1/jobs:batch`` with the same 500-job body to both,
  at 2 connections: jobs/s and ratio.

``gpuq api`` runs with the team limits off (``GPUQ_TEAM_MAX_PENDING=0``,
``GPUQ_TEAM_SUBMIT_RATE=0``): this measures the submit path, and one team's thousands of
jobs a second would pass the default rate and pending cap (``bench/flood.py`` measures those).

Targets: single >= 0.5 x bare at 8 and 32 clients, P99 < 50 ms at 32;
batch >= 0.3 x bare. Prints the load average before and after.

    TEST_DATABASE_URL=postgresql+psycopg://postgres@127.0.0.1/test \\
        .venv/bin/python bench/api.py [--seconds 5] [--rounds 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402

from app.domain.percentiles import percentile  # noqa: E402
from bench.api_jobs import nlp_job, team_token  # noqa: E402
from bench.dispatch import database  # noqa: E402
from bench.history import load  # noqa: E402
from tests.ports import free_port  # noqa: E402

BIN = Path(sys.executable).parent
# `gpuq api` refuses an admin token shorter than 32 characters
ADMIN = "bench-api-admin-token-0123456789abcdef"
AUTH = {"Authorization": f"Bearer {ADMIN}"}


@contextmanager
def server(cmd: list[str], env: dict[str, str], port: int):
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                httpx.get(f"http://127.0.0.1:{port}/docs", timeout=1)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(proc.stderr.read().decode()[-2000:]) from None
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}"
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=20)


def request_bytes(path: str, body: bytes, headers: dict[str, str]) -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json",
            f"Content-Length: {len(body)}", *(f"{k}: {v}" for k, v in headers.items())]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def one_connection(port: int, req: bytes, until: float, lat: list[float]) -> int:
    """Send ``req`` back to back on one keep-alive connection until ``until``."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    done = 0
    try:
        while time.perf_counter() < until:
            t0 = time.perf_counter()
            writer.write(req)
            head = await reader.readuntil(b"\r\n\r\n")
            status = int(head[9:12])
            length = 0
            for line in head.split(b"\r\n"):
                if line[:15].lower() == b"content-length:":
                    length = int(line[15:])
            await reader.readexactly(length)
            if status >= 300:
                raise RuntimeError(f"HTTP {status}: {head[:200]!r}")
            lat.append(time.perf_counter() - t0)
            done += 1
    finally:
        writer.close()
    return done


def drive(port: int, req: bytes, clients: int, seconds: float) -> tuple[float, list[float]]:
    """Requests per second and latencies with ``clients`` connections for ``seconds``."""
    lat: list[float] = []

    async def run() -> int:
        until = time.perf_counter() + seconds
        counts = await asyncio.gather(
            *(one_connection(port, req, until, lat) for _ in range(clients))
        )
        return sum(counts)

    t0 = time.perf_counter()
    n = asyncio.run(run())
    return n / (time.perf_counter() - t0), lat


def pct(xs: list[float], q: float) -> float:
    return percentile(xs, q) or 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=5.0, help="length of one round")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per case")
    args = ap.parse_args()
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; before: {load()}")
    gp, bp = free_port(), free_port()
    with database() as url:
        # the team limits off: one team submits thousands of jobs a second here, past the
        # default rate and pending cap (a 429 stopped the run); bench/flood.py measures them
        env = {"DATABASE_URL": url, "GPUQ_ADMIN_TOKEN": ADMIN, "GPUQ_PORT": str(gp),
               "GPUQ_DATA_DIR": str(ROOT / ".gpuq-bench"),
               "GPUQ_TEAM_MAX_PENDING": "0", "GPUQ_TEAM_SUBMIT_RATE": "0"}
        subprocess.run([str(BIN / "gpuq"), "db", "upgrade"], cwd=ROOT, check=True,
                       env={**os.environ, **env}, stdout=subprocess.DEVNULL)
        bare_cmd = [str(BIN / "python"), "-m", "uvicorn", "bench.bare_app:app", "--port",
                    str(bp), "--log-level", "info"]
        with server([str(BIN / "gpuq"), "api"], env, gp) as gurl, \
                server(bare_cmd, {}, bp):
            with httpx.Client(base_url=gurl, headers=AUTH) as c:
                token = team_token(c, "nlp")
            single = json.dumps(nlp_job("ci-shard-0", 600)).encode()
            headers = {"Authorization": f"Bearer {token}"}
            batch = json.dumps({"jobs": [nlp_job(f"ci-shard-{i}", 600)
                                         for i in range(500)]}).encode()
            cases = [
                ("single submit", "/v1/jobs", single, 8, 1),
                ("single submit", "/v1/jobs", single, 32, 1),
                ("batch submit (500 jobs)", "/v1/jobs:batch", batch, 2, 500),
            ]
            print()
            print("| case | clients | gpuq jobs/s | bare jobs/s | ratio | gpuq P50 ms "
                  "| gpuq P99 ms | bare P99 ms |")
            print("|---|---:|---:|---:|---:|---:|---:|---:|")
            for label, path, body, clients, per in cases:
                req = request_bytes(path, body, headers)
                drive(gp, req, clients, 1.0)  # warm up both (caches, connections)
                drive(bp, req, clients, 1.0)
                g_rates, b_rates, g_lat, b_lat = [], [], [], []
                for _ in range(args.rounds):
                    rate, lat = drive(bp, req, clients, args.seconds)
                    b_rates.append(rate * per)
                    b_lat += lat
                    rate, lat = drive(gp, req, clients, args.seconds)
                    g_rates.append(rate * per)
                    g_lat += lat
                g, b = statistics.median(g_rates), statistics.median(b_rates)
                print(f"| {label} | {clients} | {g:,.0f} | {b:,.0f} | {g / b:.2f} "
                      f"| {pct(g_lat, 50) * 1000:.1f} | {pct(g_lat, 99) * 1000:.1f} "
                      f"| {pct(b_lat, 99) * 1000:.1f} |", flush=True)
    print(f"\nafter: {load()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

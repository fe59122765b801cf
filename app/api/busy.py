"""At most ``GPUQ_MAX_CONCURRENT_REQUESTS`` API requests in progress; the rest wait a
bounded time, then get a 503 with Retry-After.

Why: without a bound, 200 concurrent clients queue without limit for the worker
threads of the synchronous routes (anyio's thread limiter waits forever) and then
for pooled connections, so latency grows with the crowd (a 503 promised after the
3 s pool timeout came after 19.5 s) and every request does worse. A request that
cannot start within ``GPUQ_BUSY_WAIT`` is told at once to come back (Retry-After),
which keeps the latency of the admitted ones bounded: the wait here plus the
request's own database budget (``RequestBudget``, app/store/deadline.py). Probes
and scrapes are not counted: a busy API must stay live for the kubelet and
observable for Prometheus.
"""

from __future__ import annotations

import asyncio
import json
import math

EXEMPT = ("/healthz", "/readyz", "/metrics")


class ConcurrencyLimit:
    """ASGI middleware: a semaphore of ``limit`` slots, waited for ``wait_s``."""

    def __init__(self, app, limit: int, wait_s: float) -> None:
        self.app = app
        self.limit = limit
        self.wait_s = wait_s
        self._slots: asyncio.Semaphore | None = None  # made on the server's event loop

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or self.limit <= 0 or scope["path"] in EXEMPT:
            await self.app(scope, receive, send)
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.limit)
        try:
            await asyncio.wait_for(self._slots.acquire(), timeout=self.wait_s)
        except TimeoutError:
            await self._busy(send)
            return
        try:
            await self.app(scope, receive, send)
        finally:
            self._slots.release()

    async def _busy(self, send) -> None:
        payload = json.dumps({"detail": (
            f"server busy: {self.limit} requests in progress and none ended within "
            f"{self.wait_s:g} s; retry after the Retry-After seconds")}).encode()
        await send({"type": "http.response.start", "status": 503, "headers": [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(payload)).encode()),
            (b"retry-after", str(max(1, math.ceil(self.wait_s))).encode()),
        ]})
        await send({"type": "http.response.body", "body": payload})

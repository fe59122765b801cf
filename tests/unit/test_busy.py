"""The API's concurrency bound (app/api/busy.py): beyond the limit a request waits a
bounded time, then gets a 503 with Retry-After; probes and scrapes always pass."""

from __future__ import annotations

import asyncio
import json

from app.api.busy import ConcurrencyLimit


def _app_holding(release: asyncio.Event, entered: list[str]):
    async def app(scope, receive, send) -> None:
        entered.append(scope["path"])
        if scope["path"] == "/slow":
            await release.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})
    return app


async def _call(app, path: str) -> tuple[int, dict, bytes]:
    sent: list[dict] = []

    async def receive() -> dict:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict) -> None:
        sent.append(message)

    await app({"type": "http", "path": path, "method": "GET", "headers": []}, receive, send)
    start = sent[0]
    return start["status"], dict(start["headers"]), sent[1]["body"]


def test_a_request_beyond_the_limit_is_told_to_come_back():
    async def scenario() -> None:
        release, entered = asyncio.Event(), []
        app = ConcurrencyLimit(_app_holding(release, entered), limit=2, wait_s=0.05)
        slow = [asyncio.create_task(_call(app, "/slow")) for _ in range(2)]
        while len(entered) < 2:
            await asyncio.sleep(0)
        status, headers, body = await _call(app, "/v1/jobs")  # both slots held
        assert status == 503 and headers[b"retry-after"] == b"1"
        assert "server busy: 2 requests in progress" in json.loads(body)["detail"]
        assert "/v1/jobs" not in entered  # refused before it reached the app
        for path in ("/healthz", "/readyz", "/metrics"):  # never counted
            assert (await _call(app, path))[0] == 200
        release.set()
        assert [(await t)[0] for t in slow] == [200, 200]
        assert (await _call(app, "/v1/jobs"))[0] == 200  # the slots came back

    asyncio.run(scenario())


def test_a_waiting_request_gets_the_slot_that_frees():
    async def scenario() -> None:
        release, entered = asyncio.Event(), []
        app = ConcurrencyLimit(_app_holding(release, entered), limit=1, wait_s=30)
        slow = asyncio.create_task(_call(app, "/slow"))
        while not entered:
            await asyncio.sleep(0)
        waiting = asyncio.create_task(_call(app, "/v1/queue"))
        await asyncio.sleep(0)
        assert entered == ["/slow"]  # it waits, it is not refused
        release.set()
        assert (await slow)[0] == 200 and (await waiting)[0] == 200
        assert entered == ["/slow", "/v1/queue"]

    asyncio.run(scenario())


def test_no_limit_when_zero():
    async def scenario() -> None:
        release, entered = asyncio.Event(), []
        app = ConcurrencyLimit(_app_holding(release, entered), limit=0, wait_s=0.01)
        slow = [asyncio.create_task(_call(app, "/slow")) for _ in range(50)]
        while len(entered) < 50:
            await asyncio.sleep(0)
        release.set()
        assert {(await t)[0] for t in slow} == {200}

    asyncio.run(scenario())

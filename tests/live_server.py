"""Run an ASGI app on a real uvicorn server in a thread (real sockets, real
keep-alive, FastAPI's real thread pool), for tests that load or break it."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator

import uvicorn

from tests.ports import free_port


@contextlib.contextmanager
def live_server(app, *, timeout_keep_alive: int = 30) -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1; yields its base URL, stops it on exit."""
    port = free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host="127.0.0.1",
            port=port,
            log_level="warning",
            timeout_keep_alive=timeout_keep_alive,
        )
    )
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise AssertionError("uvicorn did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)

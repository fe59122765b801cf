"""LoopService keeps going when a pass fails and counts passes."""

from __future__ import annotations

from app.dispatch.loops import LoopService


class Flaky(LoopService):
    name = "flaky"

    def __init__(self) -> None:
        super().__init__(interval=0.0)
        self.calls = 0

    def run_once(self) -> None:
        self.calls += 1
        if self.calls % 2:
            raise RuntimeError("boom")


def test_errors_are_logged_and_the_loop_continues(caplog):
    loop = Flaky()
    loop.start(loops=4)
    assert loop.calls == 4 and loop.passes == 4 and loop.errors == 2
    assert "flaky pass failed" in caplog.text


def test_stop_ends_the_loop():
    loop = Flaky()
    loop.stop()
    loop.start()
    assert loop.calls == 0

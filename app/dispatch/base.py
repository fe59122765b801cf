"""LoopService: the one shape of every background loop (Prefect style).

``run_once()`` does one pass and is what tests call; ``start()`` repeats it
every ``interval`` seconds (or sooner after :meth:`wake`), logs and keeps
going when a pass raises, and warns when a pass overruns its interval.
"""

from __future__ import annotations

import logging
import threading
import time


class LoopService:
    name: str = "loop"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.log = logging.getLogger(f"gpuq.loops.{self.name}")
        self.passes = 0
        self.errors = 0

    def run_once(self) -> None:  # pragma: no cover - abstract
        raise NotImplementedError

    def wake(self) -> None:
        """Run the next pass now (e.g. a NOTIFY said a job arrived)."""
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def start(self, loops: int | None = None) -> None:
        """Run passes until :meth:`stop` (or ``loops`` passes); blocks the caller."""
        done = 0
        while not self._stop.is_set() and (loops is None or done < loops):
            t0 = time.monotonic()
            try:
                self.run_once()
            except Exception:
                self.errors += 1
                self.log.exception("%s pass failed; continuing", self.name)
            self.passes += 1
            done += 1
            took = time.monotonic() - t0
            if took > self.interval:
                self.log.warning(
                    "%s pass took %.2fs, longer than its %.2fs interval",
                    self.name,
                    took,
                    self.interval,
                )
            if loops is not None and done >= loops:
                break
            self._wake.wait(max(0.0, self.interval - took))
            self._wake.clear()

    def start_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.start, name=f"gpuq-{self.name}", daemon=True)
        t.start()
        return t

"""LoopService: the one shape of every background loop (Prefect style).

``run_once()`` does one pass and is what tests call; ``start()`` repeats it
every ``interval`` seconds (or sooner after :meth:`wake`), logs and keeps
going when a pass raises, and warns when a pass overruns its interval.

:class:`Step`: a periodic decision (descheduler, lease reaper, tuner) that
has no thread of its own: the dispatcher's one decision thread runs it when
it is due, so nothing that decides ever runs beside the dispatcher's pass.

:class:`Part`: what each part of a dispatch pass (ingest, reconcile, bind)
is built from.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.orm import Session, sessionmaker

from app.cluster.interface import Cluster

log = logging.getLogger("gpuq.loops.dispatcher")  # the parts log as the dispatcher


class LoopService:
    name: str = "loop"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self._stop = threading.Event()
        self._wake = threading.Event()
        self.log = logging.getLogger(f"gpuq.loops.{self.name}")
        self.passes = 0
        self.errors = 0
        # time.monotonic() when the pass in progress started (None between passes) and
        # when the last pass ended (None before the first): the liveness probe's facts
        self.pass_started: float | None = None
        self.last_pass_end: float | None = None

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
        self.last_pass_end = time.monotonic()  # started: the first pass is due now
        while not self._stop.is_set() and (loops is None or done < loops):
            t0 = time.monotonic()
            self.pass_started = t0
            try:
                self.run_pass()
            except Exception:
                self.errors += 1
                self.log.exception("%s pass failed; continuing", self.name)
            finally:
                self.pass_started = None
                self.last_pass_end = time.monotonic()
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
            self._wake.wait(self.seconds_to_next_pass(took))
            self._wake.clear()

    def health(self, deadline_s: float, now: float | None = None) -> list[str]:
        """Why this loop looks stuck (empty: it is not): a pass running longer than
        ``deadline_s``, or none ended for ``deadline_s`` plus its interval. Read by
        ``/healthz``, so a wedged process is restarted."""
        now = time.monotonic() if now is None else now
        started, ended = self.pass_started, self.last_pass_end
        if started is not None and now - started > deadline_s:
            return [f"{self.name}: pass running for {now - started:.0f} s "
                    f"(bound {deadline_s:g} s)"]
        if ended is not None and started is None and now - ended > deadline_s + self.interval:
            return [f"{self.name}: no pass ended for {now - ended:.0f} s "
                    f"(bound {deadline_s:g} s)"]
        return []

    def run_pass(self) -> None:
        """What one turn of :meth:`start` runs (``run_once`` unless a loop adds more)."""
        self.run_once()

    def seconds_to_next_pass(self, took: float) -> float:
        return max(0.0, self.interval - took)

    def start_in_thread(self) -> threading.Thread:
        t = threading.Thread(target=self.start, name=f"gpuq-{self.name}", daemon=True)
        t.start()
        self._thread = t
        return t

    def stop_and_wait(self, timeout_s: float = 10.0) -> bool:
        """Stop and wait (at most ``timeout_s``) for the pass in progress to end, so
        nothing of this loop still holds a connection or a lock afterwards (a closing
        engine, a test's clean-up); True when its thread has ended."""
        self.stop()
        t: threading.Thread | None = getattr(self, "_thread", None)
        if t is None:
            return True
        t.join(timeout_s)
        return not t.is_alive()


class Step:
    """A decision made every ``interval`` seconds inside the dispatcher's thread.

    It has no thread of its own. Anyone may :meth:`wake` it: that only asks
    the dispatcher's thread to run it on its next turn (and wakes that
    thread). Tests call :meth:`run_once` directly.
    """

    name: str = "step"

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.log = logging.getLogger(f"gpuq.loops.{self.name}")
        self.passes = 0
        self.errors = 0
        self.next_due = 0.0  # time.monotonic() of the next run; 0: on the first turn
        self._woken = threading.Event()
        self._runner: LoopService | None = None

    def run_once(self) -> object:  # pragma: no cover - abstract
        raise NotImplementedError

    def attach(self, runner: LoopService) -> None:
        """Run inside ``runner``'s thread from now on (see Dispatcher.add_step)."""
        self._runner = runner

    def wake(self) -> None:
        """Run on the runner's next turn (safe from any thread)."""
        self._woken.set()
        if self._runner is not None:
            self._runner.wake()

    def seconds_to_due(self, now: float) -> float:
        return 0.0 if self._woken.is_set() else max(0.0, self.next_due - now)

    def run_if_due(self, now: float) -> None:
        """Called by the runner's thread only; logs and keeps going on errors."""
        if self.seconds_to_due(now) > 0:
            return
        self._woken.clear()
        try:
            self.run_once()
        except Exception:
            self.errors += 1
            self.log.exception("%s step failed; continuing", self.name)
        self.passes += 1
        self.next_due = time.monotonic() + self.interval


@dataclass
class Part:
    """One part of a dispatch pass: the database it writes, the cluster it
    talks to and the clock it reads "now" from (tests pass a fake one)."""

    session_factory: sessionmaker[Session]
    cluster: Cluster
    clock: Callable[[], datetime]

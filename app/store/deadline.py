"""A request's time budget, enforced where its time goes: the database.

``GPUQ_REQUEST_TIMEOUT`` bounds a whole API request, not each statement: the
API opens a :class:`Budget` per request (a context variable, so the worker
thread that runs a synchronous route sees it), and the engine events of
:func:`enforce_budgets` spend it:

* the wait for a pooled connection lasts at most what is left of the budget
  (:class:`BudgetedQueuePool`), not the full ``GPUQ_DB_POOL_TIMEOUT``;
* a statement that starts once the request has used more than :data:`SLACK_S`
  runs with ``statement_timeout`` = what is left (one ``SET`` before it), so
  PostgreSQL cancels it when the request's time is up;
* a statement with nothing left is not sent at all (:class:`RequestTimedOut`).

Every one of these ends as a 503 with ``Retry-After`` (app/api/db_errors.py).
A request that is fast (under :data:`SLACK_S` so far) pays nothing: its
statements run under the connection's default ``statement_timeout``, the
same ``GPUQ_REQUEST_TIMEOUT``, so the whole request ends within the timeout
plus :data:`SLACK_S`. Outside a request (the dispatcher's loops) there is no
budget and only the connection default applies.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Engine, event, exc
from sqlalchemy.pool import QueuePool

# a request that has used less than this runs its statements under the
# connection default (no extra round trip on the fast path)
SLACK_S = 0.25
# the connection record's flag: its session statement_timeout was changed
_CHANGED = "gpuq_budget_timeout"


class RequestTimedOut(Exception):
    """The request's budget ran out before its next statement (a 503)."""


@dataclass(frozen=True)
class Budget:
    deadline: float
    clock: Callable[[], float]

    def remaining(self) -> float:
        return self.deadline - self.clock()


_current: ContextVar[Budget | None] = ContextVar("gpuq_request_budget", default=None)


@contextlib.contextmanager
def request_budget(
    seconds: float, clock: Callable[[], float] = time.monotonic
) -> Iterator[Budget | None]:
    """The budget of the request running inside the block (none when ``seconds`` is 0)."""
    if seconds <= 0:
        yield None
        return
    budget = Budget(clock() + seconds, clock)
    token = _current.set(budget)
    try:
        yield budget
    finally:
        _current.reset(token)


def remaining() -> float | None:
    """Seconds left to the current request, None outside a request."""
    budget = _current.get()
    return None if budget is None else budget.remaining()


@contextlib.contextmanager
def no_budget() -> Iterator[None]:
    token = _current.set(None)
    try:
        yield
    finally:
        _current.reset(token)


class BudgetedQueuePool(QueuePool):
    """A QueuePool whose checkout waits at most what is left of the request's
    budget (and never more than its own timeout)."""

    @property
    def _timeout(self) -> float:
        left = remaining()
        if left is None:
            return self._base_timeout
        if left <= 0:
            raise RequestTimedOut("request timeout reached before a connection was free")
        return min(self._base_timeout, left)

    @_timeout.setter
    def _timeout(self, value: float) -> None:
        self._base_timeout = value

    def timeout(self) -> float:
        return self._base_timeout

    def recreate(self) -> QueuePool:
        with no_budget():  # the new pool keeps the configured timeout
            return super().recreate()


def enforce_budgets(engine: Engine, default_timeout_s: float | None) -> None:
    """Cut each statement of a request that has used more than :data:`SLACK_S` to
    what is left of its budget. ``default_timeout_s`` is the connection's own
    ``statement_timeout`` (None or 0: none)."""
    default = default_timeout_s or math.inf

    @event.listens_for(engine, "before_cursor_execute")
    def _spend(conn: Any, cursor: Any, statement: str, params: Any, context: Any,
               executemany: bool) -> None:
        left = remaining()
        if left is None or left >= default - SLACK_S:
            return
        if left <= 0:
            raise RequestTimedOut("request timeout reached")
        cursor.execute(f"SET statement_timeout = {max(1, math.ceil(left * 1000))}")
        conn.connection.info[_CHANGED] = True

    @event.listens_for(engine, "checkout")
    def _restore(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        # a timeout set for a slow request stays on the connection (autocommit, or
        # committed with its transaction): back to the default for the next user
        if not record.info.pop(_CHANGED, False):
            return
        try:
            with dbapi_conn.cursor() as cur:
                cur.execute("RESET statement_timeout")
            if not dbapi_conn.autocommit:
                dbapi_conn.commit()
        except Exception as e:  # the connection died meanwhile: the pool opens another
            raise exc.DisconnectionError(str(e)) from e

"""Value formatting for people: the dashboard's Jinja2 filters and the CLI share these.

Numbers are rounded (``14.286000000000001`` reads ``14.29``), durations read
``1h05m``, timestamps are ISO 8601 UTC to the second. Escaping is not done
here: Jinja2's autoescape escapes every value a template prints.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from jinja2 import Undefined
from markupsafe import Markup

from app.domain.people import iso_utc


def num(value: Any, digits: int = 4) -> str:
    """A number with at most ``digits`` significant digits (ints unchanged), '-' for None."""
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def secs(value: float | None) -> str:
    """A duration for people: ``45s``, ``3m05s``, ``2h10m``, ``3d04h``."""
    if value is None:
        return "-"
    s = int(round(value))
    if s < 0:
        return "-" + secs(-s)
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def when(value: datetime | str | float | None) -> str:
    """ISO 8601 UTC to the second (``2026-12-01T02:40:05Z``, :func:`app.domain.people.iso_utc`,
    the API's one format) from a datetime, an ISO string or epoch seconds."""
    if value is None or value == "":
        return "-"
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    return iso_utc(value)


def bar(ratio: float | None) -> Markup:
    """A small horizontal bar with the percentage: red above 90%, amber above 60%."""
    r = max(0.0, min(1.0, ratio or 0.0))
    colour = "#d33" if r > 0.9 else "#e0a100" if r > 0.6 else "#3b82f6"
    return Markup(
        f'<span class="bar" title="{r:.0%}"><span style="width:{r * 100:.0f}%;'
        f'background:{colour}"></span></span> {r:.0%}'
    )


def _defined(f: Callable[..., Any]) -> Callable[..., Any]:
    """A template's missing value (jinja2 ``Undefined``) prints as a missing number: '-'."""

    def filt(value: Any, *args: Any) -> Any:
        return f(None if isinstance(value, Undefined) else value, *args)

    return filt


FILTERS = {
    k: _defined(f)
    for k, f in {"num": num, "pct": pct, "secs": secs, "when": when, "bar": bar}.items()
}

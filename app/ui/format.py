"""Value formatting for people: the dashboard's Jinja2 filters and the CLI share these.

Numbers are rounded (``14.286000000000001`` reads ``14.3``, ``3.33333`` ``3.33``), durations
``1h05m``, timestamps are ISO 8601 UTC to the second. Escaping is not done
here: Jinja2's autoescape escapes every value a template prints.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from jinja2 import Undefined
from markupsafe import Markup

from app.domain.people import iso_utc


def num(value: Any) -> str:
    """A number as people read it, '-' for None: whole numbers with thousands
    separators (``1,000``); from 100 up no decimals (``4,490``), from 10 one
    (``14.3``), below that two at most (``3.33``, ``2.86``, ``0.5``), and two
    significant digits for tiny values (``0.0012``)."""
    if value is None or isinstance(value, bool):
        return "-" if value is None else str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if not isinstance(value, float):
        return str(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    a = abs(value)
    if a >= 100 or value == int(value):
        return f"{round(value):,}"
    if a >= 10:
        text = f"{value:.1f}"
    elif a >= 0.01:
        text = f"{value:.2f}"
    else:
        return f"{value:.2g}"
    return text.rstrip("0").rstrip(".")


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
            parsed = datetime.fromisoformat(value)
        except ValueError:
            return value
        return iso_utc(parsed)
    return iso_utc(value)


def bar(ratio: float | None) -> Markup:
    """A small horizontal bar with the percentage: red above 90%, amber above 60%."""
    r = max(0.0, min(1.0, ratio or 0.0))
    colour = "#d33" if r > 0.9 else "#e0a100" if r > 0.6 else "#3b82f6"
    return Markup(
        f'<span class="bar" title="{r:.0%}"><span style="width:{r * 100:.0f}%;'
        f'background:{colour}"></span></span> {r:.0%}'
    )


def request_text(spec: Mapping[str, Any] | None) -> str:
    """What the job asked for, in one line (replicas x GPUs of types, memory, CPU)."""
    if not spec:
        return "-"
    r = spec.get("resources") or {}
    n = spec.get("replicas") or 1
    if r.get("gpu_units") is not None:
        what = f"{num(r['gpu_units'])} CU"
    elif r.get("mig"):
        what = f"MIG {r['mig']}"
    elif r.get("gpu_share") is not None:
        what = f"{num(r['gpu_share'])} of a GPU"
    else:
        what = f"{num(r.get('gpus', 0))} GPU(s)"
    types = ", ".join(r.get("gpu_types") or []) or "any type"
    mem = f", >= {num(r['min_gpu_memory_gb'])} GB/card" if r.get("min_gpu_memory_gb") else ""
    return (f"{n} x {what} ({types}{mem}), {num(r.get('cpu', 1))} CPU, "
            f"{num(r.get('memory_gb', 1))} GB per replica")


def placement_text(job: Mapping[str, Any]) -> str:
    allocs = job.get("allocations") or []
    if not allocs:
        return "-"
    nodes = sorted({a.get("node", "?") for a in allocs})
    types = sorted({a.get("gpu_type") or "cpu" for a in allocs})
    return f"{', '.join(types)} on {', '.join(nodes[:3])}{' ...' if len(nodes) > 3 else ''}"


def _defined(f: Callable[..., Any]) -> Callable[..., Any]:
    """A template's missing value (jinja2 ``Undefined``) prints as a missing number: '-'."""

    def filt(value: Any, *args: Any) -> Any:
        return f(None if isinstance(value, Undefined) else value, *args)

    return filt


_FILTER_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "num": num, "pct": pct, "secs": secs, "when": when, "bar": bar,
    "request": request_text, "placement": placement_text,
}
FILTERS = {k: _defined(f) for k, f in _FILTER_FUNCTIONS.items()}

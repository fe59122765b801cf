"""The ONE way gpuq writes times and numbers for people: the REST API, the dashboard and
the CLI all go through these functions.

* A timestamp is ISO 8601 UTC to the second, ``2026-12-01T05:52:58Z`` (no
  microseconds, no ``+00:00``, never epoch seconds next to ISO strings).
* A computed number is rounded: to 3 decimals from 1 up (``14.286000000000001``
  reads ``14.286``, a wait ``103.712`` s), to 4 significant digits below 1 (a
  compute fraction ``0.4286`` stays as configured).

:func:`for_people` applies both to a whole JSON-able document: ``datetime``
values, and epoch numbers under a key named ``at`` or ending in ``_at`` (the
API's naming rule for timestamps), become ISO strings; floats are rounded.
The response models of app/api/schemas.py use :data:`UtcTime` and
:data:`Rounded`, which call the same functions.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import PlainSerializer, WithJsonSchema


def iso_utc(value: datetime | float | int) -> str:
    """``2026-12-01T05:52:58Z`` from a datetime (naive = UTC) or epoch seconds."""
    if isinstance(value, int | float):
        value = datetime.fromtimestamp(value, UTC)
    elif value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def rounded(x: float) -> float:
    """3 decimals from 1 up, 4 significant digits below (see the module docstring)."""
    if x != x or x in (float("inf"), float("-inf")):
        return x
    return round(x, 3) if abs(x) >= 1 else float(f"{x:.4g}")


def _is_time_key(key: object) -> bool:
    return isinstance(key, str) and (key == "at" or key.endswith("_at"))


def for_people(value: Any, key: object = None) -> Any:
    """``value`` with every timestamp as :func:`iso_utc` and every float :func:`rounded`."""
    if isinstance(value, datetime):
        return iso_utc(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float) and _is_time_key(key):
        return iso_utc(value)
    if isinstance(value, float):
        return rounded(value)
    if isinstance(value, Mapping):
        return {k: for_people(v, k) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [for_people(v) for v in value]
    return value


#: a response field that is a timestamp (serialized by :func:`iso_utc`)
UtcTime = Annotated[
    datetime,
    PlainSerializer(iso_utc, return_type=str, when_used="json"),
    WithJsonSchema({"type": "string", "format": "date-time", "examples": ["2026-12-01T05:52:58Z"]},
                   mode="serialization"),
]
#: a response field that is a computed number (serialized by :func:`rounded`)
Rounded = Annotated[float, PlainSerializer(rounded, return_type=float, when_used="json")]

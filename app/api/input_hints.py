"""Validation errors that say how to fix them: a misspelt field gets "did you mean", a
name that is not even a valid name (``A100``, ``team: NLP``) is answered as the unknown
name it is, with the valid ones, instead of a lecture on the DNS-label pattern.

Works on pydantic's error list before the API turns it into ``detail``
(app/main.py); the catalog is the cached one (no database read on the event loop), so
when no submit has read it yet the hint lists no names but still says what is wrong.
"""

from __future__ import annotations

import difflib
import re
from functools import cache
from typing import Any

from app.domain.config import GpuqConfig, model_field_names
from app.domain.errors import unknown
from app.domain.spec import JobSpec, where_it_goes
from app.store.catalog_cache import CatalogView

#: the last part of an error's location -> (what it names, catalog attribute)
NAMED = {
    "team": ("team", "teams"),
    "pool": ("pool", "pools"),
    "priority": ("priority class", "priorities"),
    "gpu_types": ("GPU type", "types"),
    "avoid_gpu_types": ("GPU type", "types"),
    "gpu_type": ("GPU type", "types"),
}


#: a field's name ending -> (its unit, an example value)
UNITS = {"_s": ("seconds", "3600 for an hour"), "_gb": ("GB", "64"), "gpus": ("cards", "2"),
         "cpu": ("CPUs", "8")}


@cache
def known_fields() -> tuple[str, ...]:
    """The field names a body may use (job specs and config objects)."""
    return tuple(sorted(model_field_names(JobSpec) | model_field_names(GpuqConfig)))


def _where(loc: list[str]) -> list[str]:
    """The location without pydantic's list indexes and type tags."""
    return [x for x in loc if not x.isdigit() and not x.startswith("function-")]


def hint(err: dict[str, Any], catalog: CatalogView | None) -> str | None:
    """A better message for one pydantic error, or None to keep pydantic's."""
    loc = _where([str(x) for x in err.get("loc", ())])
    if not loc:
        return None
    last = loc[-1]
    kind = err.get("type")
    if kind in ("literal_error", "enum") and isinstance(err.get("input"), str):
        # "Input should be 'binpack' or 'spread'" -> the nearest value first
        expected = str((err.get("ctx") or {}).get("expected", ""))
        values = re.findall(r"'([^']*)'", expected)
        if values:
            return unknown(last.replace("_", " "), err["input"], values)
    if kind in ("float_type", "int_type", "float_parsing", "int_parsing") and \
            isinstance(err.get("input"), str):
        # "1h", "64Gi", "two": say the unit the field is in, with an example
        unit = next((u for suffix, u in UNITS.items() if last.endswith(suffix)), None)
        whole = kind.startswith("int")
        return (f"expected a{' whole' if whole else ''} number"
                + (f" of {unit[0]} (e.g. {unit[1]})" if unit else "")
                + f", got {err['input']!r}")
    if kind == "extra_forbidden":
        if last in known_fields():  # a real field, in the wrong place
            return f"unknown field here{where_it_goes(last, loc[-2:-1] == ['resources'])}"
        close = difflib.get_close_matches(last, known_fields(), n=1, cutoff=0.6)
        return f"unknown field{f' (did you mean {close[0]}?)' if close else ''}"
    # the DNS-label check is an AfterValidator (app/domain/spec.py), so pydantic reports
    # a value_error, not a pattern mismatch: both are an unknown name here
    bad_name = kind == "string_pattern_mismatch" or (
        kind == "value_error" and "must be a DNS label" in str(err.get("msg", "")))
    if bad_name and last in NAMED and isinstance(err.get("input"), str):
        what, attr = NAMED[last]
        names = getattr(catalog, attr) if catalog is not None else ()
        if names:
            return unknown(what, err["input"], names)
        return f"unknown {what} {err['input']!r} (names are lower-case, e.g. " \
            f"{err['input'].lower()!r})"
    return None

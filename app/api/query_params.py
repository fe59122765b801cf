"""Query parameters an operation does not declare are refused (422), with the nearest
one it does: a misspelt filter (``GET /v1/jobs?stauts=running``) was ignored, and the
answer was every job, read as "these are the running ones". Unknown body fields and
config keys are refused the same way."""

from __future__ import annotations

from collections.abc import Iterator

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from app.domain.errors import InputError, unknown

# the attribute a route keeps its query parameters' names in (on the route itself: an
# id(route) key could be reused by a later app's route with other parameters)
_KNOWN = "_gpuq_query_names"


def known_query(route: APIRoute) -> frozenset[str]:
    """The names (aliases) of the query parameters ``route`` reads, its dependencies'
    included (read once per route)."""
    got: frozenset[str] | None = getattr(route, _KNOWN, None)
    if got is None:
        got = frozenset(_query_names(route.dependant))
        setattr(route, _KNOWN, got)
    return got


def _query_names(dependant: Dependant) -> Iterator[str]:
    yield from (p.alias for p in dependant.query_params)
    for sub in dependant.dependencies:
        yield from _query_names(sub)


def refuse_unknown_query(request: Request) -> None:
    """A dependency of every API route: the first unknown query parameter is a 422."""
    if not request.query_params:
        return
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    known = known_query(route)
    for key in request.query_params:
        if key not in known:
            raise InputError(unknown("parameter", key, known), "query")

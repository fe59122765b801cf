"""What a scoring function reads of a request, declared once; cache keys derive from it.

Placement caches a node state's score per request (``ctx.score_cache``), which is
right only if two requests with equal keys get the same score on every node. So the
score declares the request fields it reads (:func:`reads_job`) and the key is the
tuple of exactly those fields (:func:`job_view`), as node filters declare node
aspects (:mod:`app.scheduling.node_reads`) and admission gates declare theirs
(:mod:`app.scheduling.gates`). ``tests/unit/test_job_signature.py`` checks both
properties with hypothesis.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from operator import attrgetter
from typing import TypeVar

from app.scheduling.model import JobRequest

F = TypeVar("F", bound=Callable[..., object])
JOB_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(JobRequest))


def check_fields(names: frozenset[str] | set[str], who: str) -> None:
    unknown = set(names) - set(JOB_FIELDS)
    if unknown:
        raise ValueError(f"{who} reads unknown request fields {sorted(unknown)}")


def reads_job(*names: str) -> Callable[[F], F]:
    """Declare the request fields a function reads (kept on it as ``job_reads``)."""
    declared = frozenset(names)
    check_fields(declared, "a declaration")

    def mark(fn: F) -> F:
        fn.job_reads = declared  # type: ignore[attr-defined]
        return fn

    return mark


def view(names: frozenset[str] | set[str]) -> Callable[[JobRequest], tuple]:
    """The request's ``names`` fields as a tuple, in :class:`JobRequest` order."""
    ordered = tuple(f for f in JOB_FIELDS if f in names)
    if not ordered:
        return lambda job: ()
    get = attrgetter(*ordered)
    if len(ordered) == 1:
        return lambda job: (get(job),)
    return get


def job_view(*fns: Callable[..., object]) -> Callable[[JobRequest], tuple]:
    """What the functions declare they read of a request, as one tuple."""
    names: set[str] = set()
    for fn in fns:
        names |= getattr(fn, "job_reads")  # noqa: B009 - set by reads_job
    return view(names)

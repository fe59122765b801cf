"""Errors that carry an HTTP meaning without importing FastAPI.

Store and domain code raise these; the API turns them into a 4xx whose
``detail`` starts with the field at fault, so bad input never becomes a 500.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

from app.domain.pod_policy import Violation, describe


class GpuqError(Exception):
    status_code = 400

    def __init__(self, detail: str, field: str | None = None) -> None:
        self.field = field
        self.detail = f"{field}: {detail}" if field else detail
        super().__init__(self.detail)


class InputError(GpuqError):
    """The request names something that does not exist or is not allowed."""

    status_code = 422


class NotFound(GpuqError):
    status_code = 404


class Conflict(GpuqError):
    status_code = 409


class Forbidden(GpuqError):
    status_code = 403


class TooManyRequests(GpuqError):
    """A team is over one of its caps (pending jobs, submit rate): 429, and
    ``retry_after_s`` becomes the ``Retry-After`` header."""

    status_code = 429

    def __init__(self, detail: str, retry_after_s: int, field: str | None = None) -> None:
        self.retry_after_s = max(1, int(retry_after_s))
        super().__init__(detail, field)


class PodPolicyError(InputError):
    """A ``pod_template`` the team's Pod policy refuses (app/domain/pod_policy.py):
    the detail names the first field paths, ``violations`` holds them all."""

    def __init__(self, violations: list[Violation]) -> None:
        self.violations = list(violations)
        super().__init__(describe(self.violations))


def unknown(kind: str, name: str, known: Iterable[str]) -> str:
    """``unknown GPU type 'a100-80gb' (did you mean a100-80g? known: a100-80g, v100-16g)``:
    the valid values and the nearest one, so the fix is in the message (names are
    compared case-insensitively for the suggestion: ``NLP`` -> ``nlp``)."""
    names = sorted(known)
    by_lower = {n.lower(): n for n in names}
    close = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=0.6)
    hint = f"did you mean {by_lower[close[0]]}? " if close else ""
    listed = ", ".join(names[:20]) + (f" and {len(names) - 20} more" if len(names) > 20 else "")
    return f"unknown {kind} {name!r} ({hint}known: {listed or 'none'})"


def error_block(head: str, problems: list[str]) -> str:
    """Several problems at once (a config or scenario file): the first line is
    :func:`error_line`'s form, then one indented line per problem, so each reads on
    its own and a script still greps ``gpuq: error:``."""
    if len(problems) == 1:
        return error_line(f"{head}: {problems[0]}")
    return error_line(f"{head}: {len(problems)} problems") + "".join(
        "\n  - " + " ".join(p.split()) for p in problems)


def error_line(detail: object) -> str:
    """The ONE form of every ``gpuq`` command-line error: ``gpuq: error: <detail>`` on a
    single line (a multi-line detail, e.g. pydantic's, is folded), so scripts can grep it
    and a terminal never shows a box or a traceback for a user's mistake; only a malformed
    file's excerpt, with a caret under the problem, follows on indented lines."""
    text = str(detail)
    if text.startswith("gpuq: error: "):  # formed already (an error_block passed up)
        return text
    # a malformed file's lines with the caret under the problem (YamlInputError.context)
    # follow, indented: folded onto the one line they said nothing
    context = getattr(detail, "context", None)
    if not isinstance(context, tuple):  # (PyYAML's own errors have a text "context")
        context = ()
    return "gpuq: error: " + " ".join(text.split()) + "".join(f"\n    {c}" for c in context)

"""The next page of a list that stays a list body (GET /v1/queue, GET /v1/leases): its
cursor in ``X-Next-Cursor`` and the whole URL in ``Link``, both absent on the last page."""

from __future__ import annotations

from fastapi import Request, Response

NEXT_HEADERS = {
    "X-Next-Cursor": {"description": "cursor of the next page (absent on the last page)"},
    "Link": {"description": 'the next page as `<URL>; rel="next"` (absent on the last page)'},
}


def link_next_page(request: Request, response: Response, next_cursor: str | None) -> None:
    """Set :data:`NEXT_HEADERS` for ``next_cursor`` (None: the last page, nothing set)."""
    if next_cursor is None:
        return
    response.headers["X-Next-Cursor"] = next_cursor
    url = request.url.include_query_params(cursor=next_cursor)
    response.headers["Link"] = f'<{url}>; rel="next"'

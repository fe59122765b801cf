"""Tiny HTML helpers: every value goes through :func:`esc`, so job names cannot inject markup."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from html import escape
from typing import Any
from urllib.parse import urlencode

NAV = (
    ("/ui", "GPU types"),
    ("/ui/queue", "Queue"),
    ("/ui/pools", "Pools & leases"),
    ("/ui/fairness", "Fairness"),
    ("/ui/jobs", "Jobs"),
    ("/ui/tuning", "Tuner"),
)

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1d2330;
background:#f5f6f8}
header{background:#1d2330;color:#fff;padding:.6rem 1.2rem;display:flex;gap:1.2rem;
align-items:center;flex-wrap:wrap}
header a{color:#cfd6e4;text-decoration:none}header a.on{color:#fff;font-weight:600}
header .brand{font-weight:700;color:#fff;margin-right:1rem}
main{padding:1rem 1.2rem}h1{font-size:1.3rem;margin:.2rem 0 1rem}h2{font-size:1.05rem}
table{border-collapse:collapse;background:#fff;margin:.4rem 0 1.2rem;font-size:.9rem}
th,td{padding:.35rem .6rem;border-bottom:1px solid #e3e6ec;text-align:left;vertical-align:top}
th{background:#eef0f4}td.num{text-align:right;font-variant-numeric:tabular-nums}
.bar{background:#e3e6ec;width:140px;height:.7rem;border-radius:3px;display:inline-block}
.bar>span{display:block;height:100%;border-radius:3px;background:#3b82f6}
.alert{background:#fde8e8;border-left:4px solid #d33;padding:.5rem .8rem;margin:.4rem 0}
.ok{background:#e7f6ec;border-left:4px solid #2a9d55;padding:.5rem .8rem;margin:.4rem 0}
.note{color:#5b6375;font-size:.85rem}.s-pending{color:#a36b00}.s-running{color:#1a7f37}
.s-failed,.s-unschedulable{color:#c22}.s-succeeded{color:#1a7f37;font-weight:600}
form.filters{display:flex;gap:.5rem;flex-wrap:wrap;align-items:end;margin-bottom:.6rem}
form.filters label{font-size:.8rem;display:flex;flex-direction:column}
footer{padding:1rem 1.2rem;color:#5b6375;font-size:.8rem}
"""


def esc(value: Any) -> str:
    if value is None:
        return "-"
    return escape(str(value), quote=True)


def num(value: Any, digits: int = 4) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return esc(value)


def pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.0%}"


def secs(value: float | None) -> str:
    if value is None:
        return "-"
    s = int(round(value))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m{s % 60:02d}s"
    if s < 86400:
        return f"{s // 3600}h{(s % 3600) // 60:02d}m"
    return f"{s // 86400}d{(s % 86400) // 3600:02d}h"


def bar(ratio: float | None) -> str:
    r = max(0.0, min(1.0, ratio or 0.0))
    colour = "#d33" if r > 0.9 else "#e0a100" if r > 0.6 else "#3b82f6"
    return (
        f'<span class="bar" title="{r:.0%}"><span style="width:{r * 100:.0f}%;'
        f'background:{colour}"></span></span> {r:.0%}'
    )


def status(value: str | None) -> str:
    return f'<span class="s-{esc(value)}">{esc(value)}</span>'


def table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    *,
    numeric: Iterable[int] = (),
    empty: str = "nothing here",
    table_id: str | None = None,
) -> str:
    """Cells are already-escaped HTML; ``numeric`` column indexes are right-aligned."""
    nums = set(numeric)
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = "".join(
            f'<td class="num">{c}</td>' if i in nums else f"<td>{c}</td>" for i, c in enumerate(row)
        )
        body.append(f"<tr>{cells}</tr>")
    if not body:
        body.append(f'<tr><td colspan="{len(headers)}" class="note">{esc(empty)}</td></tr>')
    ident = f' id="{esc(table_id)}"' if table_id else ""
    return f"<table{ident}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


def alerts_block(alerts: Sequence[Mapping[str, Any]], none: str = "no alerts firing") -> str:
    if not alerts:
        return f'<div class="ok">{esc(none)}</div>'
    return "".join(
        f'<div class="alert"><b>{esc(a.get("type"))}</b>: {esc(a.get("message"))}</div>'
        for a in alerts
    )


def link(path: str, text: str, **params: Any) -> str:
    q = urlencode({k: v for k, v in params.items() if v not in (None, "")})
    return f'<a href="{esc(path + ("?" + q if q else ""))}">{esc(text)}</a>'


def page(title: str, active: str, body: str, *, refresh_s: int | None = 10) -> str:
    nav = "".join(
        f'<a href="{href}"{" class=on" if href == active else ""}>{esc(name)}</a>'
        for href, name in NAV
    )
    meta = f'<meta http-equiv="refresh" content="{refresh_s}">' if refresh_s else ""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"{meta}<title>gpuq · {esc(title)}</title>"
        '<link rel="icon" href="data:,">'
        f"<style>{CSS}</style></head><body>"
        f'<header><span class="brand">gpuq</span>{nav}'
        '<a href="/docs">API docs</a><a href="/metrics">metrics</a></header>'
        f"<main><h1>{esc(title)}</h1>{body}</main>"
        f"<footer>refreshes every {refresh_s or '-'} s · "
        '<a href="/docs">OpenAPI</a> · <a href="/openapi.json">openapi.json</a></footer>'
        "</body></html>"
    )

"""Client commands for people at a terminal: submit, jobs, job, queue, cancel, usage.

They speak the REST contract of docs/api.md over httpx and print with rich.
The server URL and token come from ``--url`` / ``--token`` or the
``GPUQ_URL`` / ``GPUQ_TOKEN`` environment variables. Errors are one clear
line, ``gpuq: error: <detail>`` (the server's ``detail`` or why the server
could not be reached), and a non-zero exit code: 1 for a refused request, 2
for a connection problem or a bad local file. List commands page with
``--limit`` and ``--cursor``; ``submit -f`` posts a list of jobs as ONE
all-or-nothing ``POST /v1/jobs:batch``.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from app.domain.errors import error_line
from app.ui.format import num as fmt_num  # numbers rounded for people, as the dashboard does
from app.ui.format import secs as fmt_s  # one duration format for the CLI and the dashboard
from app.ui.format import when as fmt_when  # ISO 8601 UTC to the second

DEFAULT_URL = "http://127.0.0.1:8000"

STATUS_STYLE = {
    "pending": "yellow",
    "admitted": "cyan",
    "running": "green",
    "succeeded": "bold green",
    "failed": "bold red",
    "cancelled": "dim",
    "unschedulable": "red",
}


class ClientError(Exception):
    """A failure to report in one line; ``code`` is the exit status."""

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code


class Client:
    """A thin httpx wrapper that turns every failure into a :class:`ClientError`."""

    def __init__(
        self,
        url: str | None = None,
        token: str | None = None,
        *,
        transport: httpx.BaseTransport | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        self.url = (url or os.environ.get("GPUQ_URL") or DEFAULT_URL).rstrip("/")
        self.token = token or os.environ.get("GPUQ_TOKEN")
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        self.http = httpx.Client(
            base_url=self.url, headers=headers, timeout=timeout_s, transport=transport
        )

    def send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """The response of a request that succeeded (2xx/3xx); a ClientError otherwise."""
        try:
            r = self.http.request(method, path, **kw)
        except httpx.TransportError as e:
            raise ClientError(f"cannot reach gpuq at {self.url}: {e}", code=2) from e
        if r.status_code >= 400:
            raise ClientError(f"{r.status_code} {r.reason_phrase}: {_detail(r)}")
        return r

    def request(self, method: str, path: str, **kw: Any) -> Any:
        return self._json(self.send(method, path, **kw), path)

    def _json(self, r: httpx.Response, path: str) -> Any:
        if not r.content:
            return None
        try:
            return r.json()
        except ValueError as e:
            raise ClientError(f"{self.url}{path} did not answer JSON (is this gpuq?)", 2) from e

    def page(self, path: str, **params: Any) -> tuple[Any, str | None]:
        """A GET of a paged list: the body and the next page's cursor (``next_cursor`` in
        the body, or the ``X-Next-Cursor`` header of a list body such as the queue's)."""
        clean = {k: v for k, v in params.items() if v is not None}
        r = self.send("GET", path, params=clean)
        body = self._json(r, path)
        nxt = body.get("next_cursor") if isinstance(body, dict) else None
        return body, nxt or r.headers.get("X-Next-Cursor")

    def get(self, path: str, **params: Any) -> Any:
        clean = {k: v for k, v in params.items() if v is not None}
        return self.request("GET", path, params=clean)

    def post(self, path: str, body: Any = None, headers: Mapping[str, str] | None = None) -> Any:
        return self.request("POST", path, json=body, headers=dict(headers or {}))


def _detail(r: httpx.Response) -> str:
    """The server's ``detail`` (a string, or FastAPI's list of field errors)."""
    try:
        body = r.json()
    except ValueError:
        return r.text.strip()[:300] or "(no body)"
    detail = body.get("detail", body) if isinstance(body, dict) else body
    if isinstance(detail, list):
        parts = []
        for item in detail:
            if isinstance(item, dict):
                loc = ".".join(str(x) for x in item.get("loc", []) if x != "body")
                parts.append(f"{loc}: {item.get('msg', item)}" if loc else str(item.get("msg")))
            else:
                parts.append(str(item))
        return "; ".join(parts)
    return str(detail)


# -- helpers ---------------------------------------------------------------------------------


def load_job_file(path: str) -> list[dict[str, Any]]:
    """A job spec file (YAML or JSON): one job, a list of jobs, or ``{jobs: [...]}``."""
    p = Path(path)
    if path == "-":
        text = sys.stdin.read()
    else:
        if not p.is_file():
            raise ClientError(f"{path}: no such file", code=2)
        text = p.read_text()
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        raise ClientError(f"{path}: not valid YAML/JSON: {e}", code=2) from e
    if isinstance(data, dict) and "jobs" in data and "name" not in data:
        data = data["jobs"]
    jobs = data if isinstance(data, list) else [data]
    if not jobs or not all(isinstance(j, dict) for j in jobs):
        raise ClientError(f"{path}: expected a job mapping or a list of them", code=2)
    return jobs


def status_text(status: str | None) -> str:
    style = STATUS_STYLE.get(status or "", "")
    return f"[{style}]{status}[/]" if style else str(status)


def placement_text(job: Mapping[str, Any]) -> str:
    allocs = job.get("allocations") or []
    if not allocs:
        return "-"
    nodes = sorted({a.get("node", "?") for a in allocs})
    types = sorted({a.get("gpu_type") or "cpu" for a in allocs})
    return f"{', '.join(types)} on {', '.join(nodes[:3])}{' ...' if len(nodes) > 3 else ''}"


def jobs_table(items: Iterable[Mapping[str, Any]], title: str = "jobs") -> Table:
    t = Table(title=title, header_style="bold")
    for col in ("id", "name", "team", "pool", "prio", "status", "wait", "CU", "where / reason"):
        t.add_column(col, overflow="fold")
    for j in items:
        where = placement_text(j) if j.get("allocations") else (j.get("reason") or "-")
        t.add_row(
            str(j.get("id")),
            str(j.get("name")),
            str(j.get("team")),
            str(j.get("pool")),
            str(j.get("priority")),
            status_text(j.get("status")),
            fmt_s(j.get("wait_seconds")),
            fmt_num(j.get("units")),
            where,
        )
    return t


# -- commands (each returns an exit code) ----------------------------------------------------


def cmd_submit(
    client: Client, console: Console, file: str, idempotency_key: str | None = None
) -> int:
    """One job: ``POST /v1/jobs`` (with ``Idempotency-Key`` if given). A list: ONE
    ``POST /v1/jobs:batch``, all or nothing, so a retry after an error never doubles a
    part of it; that route takes no key, so a key with a list is refused."""
    jobs = load_job_file(file)
    if len(jobs) == 1:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        job = client.post("/v1/jobs", jobs[0], headers)
        console.print(
            f"submitted job [bold]{job.get('id')}[/] {job.get('name')} "
            f"(team {job.get('team')}, pool {job.get('pool')}, {job.get('priority')}): "
            f"{status_text(job.get('status'))}"
        )
        return 0
    if idempotency_key:
        raise ClientError(
            f"{file}: --idempotency-key applies to one job; a list of {len(jobs)} is submitted "
            "as one all-or-nothing batch (POST /v1/jobs:batch), which takes no key", code=2)
    body = client.post("/v1/jobs:batch", {"jobs": jobs})
    for item, spec in zip(body.get("items", []), jobs, strict=False):
        console.print(
            f"submitted job [bold]{item.get('id')}[/] {item.get('name')} "
            f"(team {spec.get('team')}): {status_text(item.get('status'))}"
        )
    console.print(f"[dim]{len(jobs)} jobs in one batch (POST /v1/jobs:batch)[/]")
    return 0


def more_line(console: Console, command: str, cursor: str | None) -> None:
    """Where the next page is: the same command with ``--cursor``."""
    if cursor:
        console.print(f"[dim]more: {command} --cursor {cursor}[/]", highlight=False,
                      soft_wrap=True)


def cmd_jobs(
    client: Client,
    console: Console,
    *,
    team: str | None = None,
    pool: str | None = None,
    status: str | None = None,
    priority: str | None = None,
    limit: int = 50,
    cursor: str | None = None,
    output: str = "table",
) -> int:
    body, nxt = client.page(
        "/v1/jobs", team=team, pool=pool, status=status, priority=priority, limit=limit,
        cursor=cursor,
    )
    items = body.get("items", []) if isinstance(body, dict) else body
    if output == "json":
        console.print_json(json.dumps(body))
        return 0
    console.print(jobs_table(items, title=f"jobs ({len(items)})"))
    more_line(console, "gpuq jobs" + _flags(team=team, pool=pool, status=status,
                                            priority=priority, limit=limit), nxt)
    return 0


def _flags(**kw: Any) -> str:
    return "".join(f" --{k} {v}" for k, v in kw.items() if v is not None)


def cmd_job(client: Client, console: Console, job_id: str, output: str = "table") -> int:
    job = client.get(f"/v1/jobs/{job_id}")
    if output == "json":
        console.print_json(json.dumps(job))
        return 0
    t = Table(title=f"job {job.get('id')} {job.get('name')}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for key in ("team", "pool", "priority"):
        t.add_row(key, str(job.get(key)))
    t.add_row("status", status_text(job.get("status")))
    t.add_row("reason", str(job.get("reason") or "-"))
    for key in ("submitted_at", "admitted_at", "started_at", "finished_at", "estimated_start"):
        t.add_row(key, fmt_when(job.get(key)))
    t.add_row("wait", fmt_s(job.get("wait_seconds")))
    t.add_row("preemptions", str(job.get("preemption_count", 0)))
    t.add_row("CU", fmt_num(job.get("units")))
    lease = job.get("lease")
    if lease:
        t.add_row(
            "lease",
            f"{lease.get('borrower')} <- {lease.get('lender')} {fmt_num(lease.get('units'))} CU "
            f"of {lease.get('gpu_type')} until {fmt_when(lease.get('expires_at'))}",
        )
    console.print(t)
    allocs = job.get("allocations") or []
    if allocs:
        a = Table(title="allocations", header_style="bold")
        for col in ("replica", "node", "gpu_type", "gpus", "mig", "CU"):
            a.add_column(col)
        for x in allocs:
            a.add_row(
                str(x.get("replica")),
                str(x.get("node")),
                str(x.get("gpu_type") or "-"),
                fmt_num(x.get("gpus")),
                str(x.get("mig") or "-"),
                fmt_num(x.get("units")),
            )
        console.print(a)
    return 0


def cmd_queue(
    client: Client,
    console: Console,
    *,
    pool: str | None = None,
    team: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
) -> int:
    body, nxt = client.page("/v1/queue", pool=pool, team=team, limit=limit, cursor=cursor)
    items = body.get("items", body) if isinstance(body, dict) else body
    t = Table(title=f"queue ({len(items)} pending)", header_style="bold")
    for col in ("pos", "id", "name", "team", "pool", "prio", "waited", "est. start", "reason"):
        t.add_column(col, overflow="fold")
    for q in items:
        t.add_row(
            fmt_num(q.get("position")),
            str(q.get("id", q.get("job_id"))),
            str(q.get("name")),
            str(q.get("team")),
            str(q.get("pool")),
            str(q.get("priority")),
            fmt_s(q.get("wait_seconds")),
            fmt_when(q.get("estimated_start")),
            str(q.get("reason") or "-"),
        )
    console.print(t)
    more_line(console, "gpuq queue" + _flags(pool=pool, team=team, limit=limit), nxt)
    return 0


def cmd_cancel(client: Client, console: Console, job_id: str) -> int:
    job = client.post(f"/v1/jobs/{job_id}/cancel")
    status = job.get("status") if isinstance(job, dict) else "cancelled"
    console.print(f"job [bold]{job_id}[/]: {status_text(status)}")
    return 0


def cmd_tokens_list(client: Client, console: Console, team: str | None = None) -> int:
    rows = client.get("/v1/tokens", **({"team": team} if team else {}))
    t = Table(title="tokens")
    for col in ("id", "name", "scope", "prefix", "state", "expires", "created by"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["id"]), r["name"], r["scope"], r["prefix"], r["state"],
                  fmt_when(r.get("expires_at")), str(r.get("created_by") or "-"))
    console.print(t)
    return 0


def _print_new_token(console: Console, body: Mapping[str, Any]) -> None:
    console.print(f"token [bold]{body['id']}[/] {body['name']} ({body['scope']}), shown once:")
    console.print(body["token"], highlight=False, soft_wrap=True)


def cmd_tokens_create(
    client: Client,
    console: Console,
    scope: str,
    name: str | None = None,
    expires_in_s: float | None = None,
) -> int:
    body: dict[str, Any] = {"scope": scope}
    if name:
        body["name"] = name
    if expires_in_s:
        body["expires_in_s"] = expires_in_s
    _print_new_token(console, client.post("/v1/tokens", body))
    return 0


def cmd_tokens_revoke(client: Client, console: Console, token_id: int) -> int:
    r = client.post(f"/v1/tokens/{token_id}/revoke")
    console.print(f"token [bold]{r['id']}[/] {r['name']}: {r['state']}")
    return 0


def cmd_tokens_rotate(
    client: Client, console: Console, token_id: int, expires_in_s: float | None = None
) -> int:
    body = {"expires_in_s": expires_in_s} if expires_in_s else {}
    _print_new_token(console, client.post(f"/v1/tokens/{token_id}/rotate", body))
    return 0


def _usage_rows(table: Table, body: Mapping[str, Any]) -> None:
    """Pool usage (``gpu_types: {type: {guaranteed, used, ...}}``) or team usage
    (``used_by_type``, ``quota_by_type``): one row per GPU type, the rest as a caption."""
    per_type: dict[str, dict[str, Any]] = {}
    scalars: dict[str, Any] = {}
    for key, value in body.items():
        if isinstance(value, dict) and value and all(isinstance(v, dict) for v in value.values()):
            for t, inner in value.items():
                per_type.setdefault(t, {}).update(inner)
        elif isinstance(value, dict):
            if key == "total":
                scalars.update({f"total {k}": v for k, v in value.items()})
                continue
            col = key.removesuffix("_by_type")
            for t, x in value.items():
                per_type.setdefault(t, {})[col] = x
        elif not isinstance(value, list):
            scalars[key] = value
    cols = list(dict.fromkeys(k for row in per_type.values() for k in row))
    table.add_column("gpu_type")
    for c in cols:
        table.add_column(c, justify="right")
    for t in sorted(per_type):
        table.add_row(t, *(fmt_num(per_type[t].get(c)) for c in cols))
    if scalars:
        table.caption = "  ".join(f"{k}: {fmt_num(v)}" for k, v in scalars.items())


def cmd_usage(
    client: Client, console: Console, *, team: str | None = None, pool: str | None = None
) -> int:
    if team or pool:
        kind, name = ("teams", team) if team else ("pools", pool)
        body = client.get(f"/v1/{kind}/{name}/usage")
        t = Table(title=f"{kind[:-1]} {name} usage (CU)", header_style="bold")
        _usage_rows(t, body)
        console.print(t)
        return 0
    body = client.get("/v1/reports/utilization")
    t = Table(title="GPU types", header_style="bold")
    t.add_column("type", no_wrap=True)
    for col in (
        "CU/card",
        "cards",
        "cap CU",
        "alloc CU",
        "alloc",
        "free",
        "slices",
        "pend",
        "util",
    ):
        t.add_column(col, justify="right")
    for row in body.get("gpu_types", []):
        ratio = row.get("allocation_ratio") or 0.0
        style = "red" if ratio > 0.9 else "yellow" if ratio > 0.6 else "green"
        util = row.get("gpu_util")
        t.add_row(
            row.get("gpu_type"),
            fmt_num(row.get("weight")),
            fmt_num(row.get("cards")),
            fmt_num(row.get("capacity_cu")),
            fmt_num(row.get("allocated_cu")),
            f"[{style}]{ratio:.0%}[/]",
            fmt_num(row.get("free_cards")),
            fmt_num(row.get("free_slices")),
            fmt_num(row.get("pending_jobs")),
            "unknown" if util is None else f"{util:.0%}",
        )
    console.print(t)
    if body.get("gpu_util_note"):
        console.print(f"[dim]{body['gpu_util_note']}[/]")
    for alert in body.get("alerts", []):
        console.print(f"[bold red]alert[/] {alert.get('message')}")
    return 0


def run(fn: Any, *args: Any, url: str | None, token: str | None, **kw: Any) -> int:
    """Run one command with a client and consoles; a ClientError becomes a message and a code."""
    console = Console()
    try:
        client = Client(url, token)
        try:
            return fn(client, console, *args, **kw)
        finally:
            client.http.close()
    except ClientError as e:
        print(error_line(e), file=sys.stderr)
        return e.code

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

import hashlib
import json
import os
import sys
import time
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import yaml
from rich.console import Console
from rich.table import Table

from app.domain.errors import error_line
from app.domain.yaml_input import YamlInputError, load_yaml
from app.ui.format import num as fmt_num  # numbers rounded for people, as the dashboard does
from app.ui.format import placement_text, request_text  # the job page's words too
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
    """A failure to report in one line; ``code`` is the exit status, ``context`` a
    malformed file's lines around the problem (printed below the line)."""

    def __init__(self, message: str, code: int = 1, context: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.context = context


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
        if r.status_code == 401 and not self.token:
            raise ClientError(
                "no API token: set GPUQ_TOKEN or pass --token TOKEN (a team's token from "
                "`gpuq tokens create team:NAME`, or the admin token gpuq printed at start)")
        if r.status_code == 401:  # a token was sent, and the server does not take it
            raise ClientError(
                f"401 Unauthorized: {_detail(r)}; check GPUQ_TOKEN or --token (an admin "
                "makes a new one with `gpuq tokens create team:NAME`)")
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
        data = load_yaml(text, source="stdin" if path == "-" else path)
    except YamlInputError as e:
        raise ClientError(str(e), code=2, context=e.context) from None
    if isinstance(data, dict) and "jobs" in data and "name" not in data:
        data = data["jobs"]
    jobs = data if isinstance(data, list) else [data]
    if not jobs or not all(isinstance(j, dict) for j in jobs):
        raise ClientError(f"{path}: expected a job mapping or a list of them", code=2)
    return jobs


def status_text(status: str | None) -> str:
    style = STATUS_STYLE.get(status or "", "")
    return f"[{style}]{status}[/]" if style else str(status)


def jobs_table(items: Iterable[Mapping[str, Any]], title: str = "jobs") -> Table:
    t = Table(title=title, header_style="bold")
    for col in ("id", "name", "team", "pool", "prio", "status", "wait", "CU", "est. start",
                "where / reason"):
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
            fmt_when(j.get("estimated_start")),
            where,
        )
    return t


# -- commands (each returns an exit code) ----------------------------------------------------


OUTPUTS = ("table", "json", "yaml")
#: a job that left the queue for good (``--wait``/``--follow`` stop there)
ENDED = frozenset({"succeeded", "failed", "cancelled", "unschedulable"})


def emit(console: Console, output: str, body: Any) -> bool:
    """Print ``body`` as JSON or YAML when asked (True), else leave it to the table."""
    if output not in OUTPUTS:
        raise ClientError(f"unknown output format {output!r} (use {', '.join(OUTPUTS)})", 2)
    if output == "json":
        console.print_json(json.dumps(body))
        return True
    if output == "yaml":
        console.print(yaml.safe_dump(body, sort_keys=False).rstrip(), highlight=False,
                      soft_wrap=True, markup=False)
        return True
    return False


def submit_key(job: Mapping[str, Any]) -> str:
    """The default ``Idempotency-Key`` of ``gpuq submit``: a hash of the team and the
    job's content, so running the same command twice returns the first job instead of
    queueing a second identical one (the server keeps keys per team)."""
    text = json.dumps(job, sort_keys=True, separators=(",", ":"), default=str)
    digest = hashlib.sha256(f"{job.get('team')}\n{text}".encode()).hexdigest()
    return f"gpuq-cli-{digest[:40]}"


def wait_for(client: Client, console: Console, job_id: str, *, until: frozenset[str],
             timeout_s: float | None, poll_s: float, quiet: bool = False) -> dict[str, Any]:
    """Poll the job until its status is in ``until`` (printing each change); a
    ClientError with code 3 when ``timeout_s`` passes first."""
    start = time.monotonic()
    seen = None
    while True:
        job = client.get(f"/v1/jobs/{job_id}")
        status = job.get("status")
        if status != seen and not quiet:
            extra = job.get("reason") if status in ("pending", "unschedulable") else None
            console.print(f"job [bold]{job_id}[/]: {status_text(status)}"
                          + (f" ({extra})" if extra else ""), highlight=False)
            seen = status
        if status in until:
            return job
        if timeout_s is not None and time.monotonic() - start >= timeout_s:
            raise ClientError(f"job {job_id} still {status} after {timeout_s:g} s", code=3)
        time.sleep(poll_s)


def cmd_submit(
    client: Client, console: Console, file: str, idempotency_key: str | None = None,
    *, new: bool = False, wait: bool = False, timeout_s: float | None = None,
    poll_s: float = 2.0, output: str = "table",
) -> int:
    """One job: ``POST /v1/jobs`` with an ``Idempotency-Key`` (by default
    :func:`submit_key`; ``--new`` sends none, so the server makes another job). A list:
    ONE ``POST /v1/jobs:batch``, all or nothing, so a retry after an error never doubles
    a part of it; that route takes no key. ``--wait``: until the job starts or ends
    (exit 0 running/succeeded, 1 failed/cancelled/unschedulable, 3 timeout)."""
    jobs = load_job_file(file)
    if len(jobs) == 1:
        key = None if new else (idempotency_key or submit_key(jobs[0]))
        headers = {"Idempotency-Key": key} if key else {}
        r = client.send("POST", "/v1/jobs", json=jobs[0], headers=headers)
        job = client._json(r, "/v1/jobs")
        if not emit(console, output, job):
            again = r.status_code == 200
            console.print(
                f"{'already submitted: job' if again else 'submitted job'} "
                f"[bold]{job.get('id')}[/] {job.get('name')} "
                f"(team {job.get('team')}, pool {job.get('pool')}, {job.get('priority')}): "
                f"{status_text(job.get('status'))}"
                + (" [dim](same team and file, Idempotency-Key "
                   f"{key}; --new submits another)[/]" if again else "")
            )
        if wait:
            got = wait_for(client, console, str(job.get("id")),
                           until=ENDED | {"running"}, timeout_s=timeout_s, poll_s=poll_s)
            return 0 if got.get("status") in ("running", "succeeded") else 1
        return 0
    if idempotency_key or wait:
        raise ClientError(
            f"{file}: --idempotency-key and --wait apply to one job; a list of {len(jobs)} is "
            "submitted as one all-or-nothing batch (POST /v1/jobs:batch), which takes no key",
            code=2)
    body = client.post("/v1/jobs:batch", {"jobs": jobs})
    if emit(console, output, body):
        return 0
    for item, spec in zip(body.get("items", []), jobs, strict=False):
        console.print(
            f"submitted job [bold]{item.get('id')}[/] {item.get('name')} "
            f"(team {spec.get('team')}): {status_text(item.get('status'))}"
        )
    console.print(f"[dim]{len(jobs)} jobs in one batch (POST /v1/jobs:batch; a batch has no "
                  "Idempotency-Key: submitting this file again makes new jobs)[/]")
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
    if emit(console, output, body):
        return 0
    console.print(jobs_table(items, title=f"jobs ({len(items)})"))
    more_line(console, "gpuq jobs" + _flags(team=team, pool=pool, status=status,
                                            priority=priority, limit=limit), nxt)
    return 0


def _flags(**kw: Any) -> str:
    return "".join(f" --{k} {v}" for k, v in kw.items() if v is not None)


def lease_text(lease: Mapping[str, Any]) -> str:
    """A lease with its state: an ended one says so and when (it read as current)."""
    state = lease.get("state") or "active"
    base = (f"{lease.get('borrower')} <- {lease.get('lender')} {fmt_num(lease.get('units'))} CU "
            f"of {lease.get('gpu_type')}")
    if state == "active":
        return f"{base}, active until {fmt_when(lease.get('expires_at'))}"
    return f"{base}, {state} at {fmt_when(lease.get('ended_at') or lease.get('expires_at'))}"


def events_table(events: Iterable[Mapping[str, Any]], title: str = "events") -> Table:
    t = Table(title=title, header_style="bold")
    for col in ("at", "type", "from", "to", "reason"):
        t.add_column(col, overflow="fold")
    for e in events:
        t.add_row(fmt_when(e.get("at")), str(e.get("type")), str(e.get("from_status") or "-"),
                  str(e.get("to_status") or "-"), str(e.get("reason") or "-"))
    return t


def _event_line(e: Mapping[str, Any]) -> str:
    move = (f" {e.get('from_status') or '-'} -> {e.get('to_status')}" if e.get("to_status")
            else "")
    return f"{fmt_when(e.get('at'))} {e.get('type')}{move}" + (
        f": {e['reason']}" if e.get("reason") else "")


def cmd_job(client: Client, console: Console, job_id: str, output: str = "table",
            *, events: bool = False, follow: bool = False, poll_s: float = 2.0,
            timeout_s: float | None = None) -> int:
    """One job; ``--events`` adds its history; ``--follow`` prints events as they happen
    until the job ends (exit 0 succeeded, 1 otherwise, 3 timeout)."""
    job = client.get(f"/v1/jobs/{job_id}")
    evs = client.get(f"/v1/jobs/{job_id}/events") if events or follow else None
    if follow:
        return _follow(client, console, job_id, evs or [], poll_s, timeout_s)
    if emit(console, output, {**job, "events": evs} if evs is not None else job):
        return 0
    t = Table(title=f"job {job.get('id')} {job.get('name')}", show_header=False)
    t.add_column("field", style="bold")
    t.add_column("value", overflow="fold")
    for key in ("team", "pool", "priority"):
        t.add_row(key, str(job.get(key)))
    t.add_row("status", status_text(job.get("status")))
    t.add_row("reason", str(job.get("reason") or "-"))
    t.add_row("request", request_text(job.get("spec")))
    for key in ("submitted_at", "admitted_at", "started_at", "finished_at", "estimated_start"):
        t.add_row(key, fmt_when(job.get(key)))
    t.add_row("wait", fmt_s(job.get("wait_seconds")))
    t.add_row("preemptions", str(job.get("preemption_count", 0)))
    t.add_row("CU", fmt_num(job.get("units")))
    lease = job.get("lease")
    if lease:
        t.add_row("lease", lease_text(lease))
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
    if evs is not None:
        console.print(events_table(evs))
    return 0


def _follow(client: Client, console: Console, job_id: str, evs: list[dict[str, Any]],
            poll_s: float, timeout_s: float | None) -> int:
    start = time.monotonic()
    shown: set[str] = set()

    def show(evs: list[dict[str, Any]]) -> None:
        for e in evs:
            if str(e.get("id")) not in shown:
                shown.add(str(e.get("id")))
                console.print(_event_line(e), highlight=False, soft_wrap=True, markup=False)

    while True:
        show(evs)
        status = client.get(f"/v1/jobs/{job_id}").get("status")
        if status in ENDED:
            # it may have ended after the events were read: the last ones too
            show(client.get(f"/v1/jobs/{job_id}/events"))
            return 0 if status == "succeeded" else 1
        if timeout_s is not None and time.monotonic() - start >= timeout_s:
            raise ClientError(f"job {job_id} still {status} after {timeout_s:g} s", code=3)
        time.sleep(poll_s)
        evs = client.get(f"/v1/jobs/{job_id}/events")


def cmd_queue(
    client: Client,
    console: Console,
    *,
    pool: str | None = None,
    team: str | None = None,
    limit: int | None = None,
    cursor: str | None = None,
    output: str = "table",
    watch: bool = False,
    interval_s: float = 2.0,
    count: int = 0,
) -> int:
    """The queue; ``--watch`` redraws it every ``interval_s`` (``count`` times, 0 = until
    interrupted)."""
    n = 0
    while True:
        body, nxt = client.page("/v1/queue", pool=pool, team=team, limit=limit, cursor=cursor)
        if watch and output == "table" and console.is_terminal:
            console.clear()
        _print_queue(console, body, nxt, output, pool, team, limit)
        n += 1
        if not watch or (count and n >= count):
            return 0
        time.sleep(interval_s)


def _print_queue(console: Console, body: Any, nxt: str | None, output: str,
                 pool: str | None, team: str | None, limit: int | None) -> None:
    if emit(console, output, body):
        return
    items = body.get("items", body) if isinstance(body, dict) else body
    t = Table(title=f"queue ({len(items)} pending, {fmt_when(_utcnow())})", header_style="bold")
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


def _utcnow() -> str:
    return datetime.now(UTC).isoformat()


def cmd_cancel(client: Client, console: Console, job_id: str, output: str = "table") -> int:
    job = client.post(f"/v1/jobs/{job_id}/cancel")
    if emit(console, output, job):
        return 0
    status = job.get("status") if isinstance(job, dict) else "cancelled"
    console.print(f"job [bold]{job_id}[/]: {status_text(status)}")
    return 0


def _node_state(n: Mapping[str, Any]) -> str:
    cordon = n.get("cordon")
    if cordon:
        what = "draining" if cordon.get("drain") else "cordoned"
        why = f": {cordon['reason']}" if cordon.get("reason") else ""
        return f"[yellow]{what}[/] by {cordon.get('by')}{why}"
    return "ready" if n.get("schedulable", True) else "[yellow]not schedulable[/]"


def cmd_nodes_list(client: Client, console: Console, output: str = "table") -> int:
    rows = client.get("/v1/nodes")
    if emit(console, output, rows):
        return 0
    t = Table(title=f"nodes ({len(rows)})", header_style="bold")
    for col in ("name", "type", "cards free", "CPU free", "memory free", "state"):
        t.add_column(col, overflow="fold")
    for n in rows:
        free = n.get("free") or {}
        t.add_row(n["name"], n.get("gpu_type") or "CPU only",
                  f"{fmt_num(free.get('gpus'))}/{fmt_num(n.get('gpus'))}",
                  fmt_num(free.get("cpu")), f"{fmt_num(free.get('memory_gb'))} GB",
                  _node_state(n))
    console.print(t)
    return 0


def cmd_node_action(client: Client, console: Console, node: str, action: str,
                    reason: str | None = None, output: str = "table") -> int:
    """cordon, drain or uncordon one node."""
    body = {"reason": reason} if reason else None
    n = client.post(f"/v1/nodes/{node}/{action}", body)
    if emit(console, output, n):
        return 0
    console.print(f"node [bold]{n['name']}[/]: {_node_state(n)}")
    if action == "drain":
        console.print("its jobs are stopped and requeued within the dispatcher's next pass; "
                      f"`gpuq nodes uncordon {n['name']}` puts it back in service")
    return 0


def cmd_tokens_list(client: Client, console: Console, team: str | None = None,
                    output: str = "table", limit: int | None = None,
                    cursor: str | None = None) -> int:
    rows, nxt = client.page("/v1/tokens", team=team, limit=limit, cursor=cursor)
    if emit(console, output, rows):
        return 0
    t = Table(title="tokens")
    for col in ("id", "name", "scope", "prefix", "state", "expires", "created by"):
        t.add_column(col)
    for r in rows:
        t.add_row(str(r["id"]), r["name"], r["scope"], r["prefix"], r["state"],
                  fmt_when(r.get("expires_at")), str(r.get("created_by") or "-"))
    console.print(t)
    more_line(console, "gpuq tokens list" + _flags(team=team, limit=limit), nxt)
    return 0


def _print_new_token(console: Console, body: Mapping[str, Any], output: str = "table") -> None:
    if emit(console, output, body):
        return
    console.print(f"token [bold]{body['id']}[/] {body['name']} ({body['scope']}), shown once:")
    console.print(body["token"], highlight=False, soft_wrap=True)


def cmd_tokens_create(
    client: Client,
    console: Console,
    scope: str,
    name: str | None = None,
    expires_in_s: float | None = None,
    output: str = "table",
) -> int:
    body: dict[str, Any] = {"scope": scope}
    if name:
        body["name"] = name
    if expires_in_s:
        body["expires_in_s"] = expires_in_s
    _print_new_token(console, client.post("/v1/tokens", body), output)
    return 0


def cmd_tokens_revoke(client: Client, console: Console, token_id: int,
                      output: str = "table") -> int:
    r = client.post(f"/v1/tokens/{token_id}/revoke")
    if emit(console, output, r):
        return 0
    console.print(f"token [bold]{r['id']}[/] {r['name']}: {r['state']}")
    return 0


def cmd_tokens_rotate(
    client: Client, console: Console, token_id: int, expires_in_s: float | None = None,
    output: str = "table",
) -> int:
    body = {"expires_in_s": expires_in_s} if expires_in_s else {}
    _print_new_token(console, client.post(f"/v1/tokens/{token_id}/rotate", body), output)
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


def team_usage_table(body: Mapping[str, Any]) -> Table:
    """A team's use against its quota: one row per GPU type it uses or has a quota for,
    and a total row against ``quota_units`` ("unlimited" when unset), jobs as a caption."""
    used = body.get("used_by_type") or {}
    quota = body.get("quota_by_type") or {}
    t = Table(title=f"team {body.get('team')} usage (CU)", header_style="bold")
    for col, justify in (("gpu_type", "left"), ("used", "right"), ("quota", "right"),
                         ("left", "right")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for g in sorted(set(used) | set(quota)):
        q = quota.get(g)
        t.add_row(g, fmt_num(used.get(g, 0)), fmt_num(q) if q is not None else "total only",
                  fmt_num(max(0.0, q - used.get(g, 0))) if q is not None else "-")
    total_q = body.get("quota_units")
    total_u = body.get("used_units") or 0
    t.add_row("[bold]all types[/]", fmt_num(total_u),
              "unlimited" if total_q is None else fmt_num(total_q),
              "-" if total_q is None else fmt_num(max(0.0, total_q - total_u)))
    t.caption = (f"jobs: {body.get('pending', 0)} pending, {body.get('admitted', 0)} admitted, "
                 f"{body.get('running', 0)} running")
    return t


def cmd_usage(
    client: Client, console: Console, *, team: str | None = None, pool: str | None = None,
    output: str = "table",
) -> int:
    if team or pool:
        kind, name = ("teams", team) if team else ("pools", pool)
        body = client.get(f"/v1/{kind}/{name}/usage")
        if emit(console, output, body):
            return 0
        if team:
            console.print(team_usage_table(body))
            return 0
        t = Table(title=f"{kind[:-1]} {name} usage (CU)", header_style="bold")
        _usage_rows(t, body)
        console.print(t)
        return 0
    body = client.get("/v1/reports/utilization")
    if emit(console, output, body):
        return 0
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

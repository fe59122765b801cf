"""Each dashboard page, rendered from the same plain dicts the REST API returns.

Routes (:mod:`app.ui.routes`) gather the data; these functions only turn
it into HTML, so a page shows exactly what ``/v1/...`` says.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from app.domain.states import STATUSES as JOB_STATUSES  # the status filter offers every state
from app.ui.html import alerts_block, bar, esc, link, num, page, pct, secs, status, table


def overview_page(util: Mapping[str, Any], tuning: Mapping[str, Any] | None = None) -> str:
    rows = []
    for r in util.get("gpu_types", []):
        util_cell = (
            bar(r["gpu_util"])
            if r.get("gpu_util") is not None
            else '<span class="note">unknown</span>'
        )
        rows.append(
            [
                esc(r["gpu_type"]),
                num(r.get("weight")),
                num(r.get("nodes")),
                num(r.get("cards")),
                num(r.get("capacity_cu")),
                num(r.get("allocated_cu")),
                bar(r.get("allocation_ratio")),
                util_cell,
                num(r.get("free_cards")),
                f"{num(r.get('free_slices'))} / {num(r.get('total_slices'))}",
                link("/ui/queue", str(r.get("pending_jobs", 0))),
            ]
        )
    note = util.get("gpu_util_note")
    body = [
        "<h2>Alerts</h2>",
        alerts_block(util.get("alerts", [])),
        "<h2>Allocation and utilization per GPU type</h2>",
        table(
            [
                "type",
                "CU/card",
                "nodes",
                "cards",
                "capacity CU",
                "allocated CU",
                "allocation",
                "GPU util (DCGM)",
                "free cards",
                "free slices",
                "pending",
            ],
            rows,
            numeric=(1, 2, 3, 4, 5, 8),
            empty="no GPU types configured",
            table_id="gpu-types",
        ),
        f'<p class="note">{esc(note)}</p>' if note else "",
    ]
    other = util.get("pending_other") or {}
    if other:
        body.append(
            '<p class="note">also pending: '
            + ", ".join(f"{esc(k)} {esc(v)}" for k, v in sorted(other.items()))
            + "</p>"
        )
    if tuning:
        body.append(
            f'<p class="note">weight tuner: mode <b>{esc(tuning.get("mode"))}</b> · '
            f"{link('/ui/tuning', 'history')}</p>"
        )
    return page("GPU types", "/ui", "".join(body))


def queue_page(
    items: Sequence[Mapping[str, Any]],
    *,
    pool: str | None = None,
    pools: Sequence[str] = (),
    next_cursor: str | None = None,
) -> str:
    rows = [
        [
            num(q.get("position")),
            link(f"/ui/jobs/{q.get('id')}", str(q.get("id"))),
            esc(q.get("name")),
            esc(q.get("team")),
            esc(q.get("pool")),
            esc(q.get("priority")),
            secs(q.get("wait_seconds")),
            esc(q.get("reason")),
        ]
        for q in items
    ]
    first = items[0].get("position") if items else 1
    shown = (
        f"{len(items)} pending"
        if first == 1 and not next_cursor
        else f"#{first}-{items[-1].get('position')} of the pending jobs"
    )
    title = f"Queue ({shown})" + (f" · pool {pool}" if pool else "")
    more = (
        '<p class="note">'
        + link("/ui/queue", "next page", **({"pool": pool} if pool else {}), cursor=next_cursor)
        + "</p>"
        if next_cursor
        else ""
    )
    filters = (
        '<p class="note">pool: '
        + " · ".join([link("/ui/queue", "all"), *(link("/ui/queue", p, pool=p) for p in pools)])
        + "</p>"
        if pools
        else ""
    )
    return page(
        title,
        "/ui/queue",
        filters
        + table(
            ["#", "job", "name", "team", "pool", "priority", "waited", "why it waits"],
            rows,
            numeric=(0,),
            empty="the queue is empty",
            table_id="queue",
        )
        + more,
    )


def pools_page(pools: Sequence[Mapping[str, Any]], leases: Sequence[Mapping[str, Any]]) -> str:
    """One row per pool and GPU type: guaranteed, used, borrowed, lent CU (``pool_usage``)."""
    rows = []
    for p in pools:
        u = p.get("usage") or {}
        by_type = u.get("gpu_types") or {}
        first = True
        for t, v in by_type.items() or [("-", {})]:
            rows.append(
                [
                    f"<b>{esc(p.get('name'))}</b>" if first else "",
                    esc(t),
                    num(v.get("guaranteed")),
                    num(v.get("used")),
                    num(v.get("borrowed")),
                    num(v.get("lent")),
                    num(u.get("pending")) if first else "",
                    esc(p.get("reclaim")) if first else "",
                    esc(p.get("placement")) if first else "",
                ]
            )
            first = False
    lrows = [
        [
            esc(x.get("id")),
            esc(x.get("borrower")),
            esc(x.get("lender")),
            esc(x.get("gpu_type")),
            num(x.get("units")),
            link(f"/ui/jobs/{x.get('job_id')}", str(x.get("job_id"))),
            esc(x.get("started_at")),
            esc(x.get("expires_at")),
            esc(x.get("state")),
        ]
        for x in leases
    ]
    body = (
        "<h2>Pools (CU per GPU type)</h2>"
        + table(
            [
                "pool",
                "types",
                "guaranteed",
                "used",
                "borrowed",
                "lent",
                "pending",
                "reclaim",
                "placement",
            ],
            rows,
            numeric=(2, 3, 4, 5, 6),
            empty="no pools",
            table_id="pools",
        )
        + "<h2>Active leases</h2>"
        + table(
            ["lease", "borrower", "lender", "type", "CU", "job", "started", "expires", "state"],
            lrows,
            numeric=(4,),
            empty="no active leases",
            table_id="leases",
        )
    )
    return page("Pools & leases", "/ui/pools", body)


def fairness_page(report: Mapping[str, Any]) -> str:
    parts = [
        "<h2>Alerts</h2>",
        alerts_block(report.get("alerts", []), none="no head-of-line blocking detected"),
    ]
    o = report.get("overall") or {}
    window = report.get("window_s")
    parts.append(
        '<p class="note">window: '
        + " · ".join(
            link("/ui/fairness", label, window_s=w)
            for label, w in (("1 h", 3600), ("6 h", 21600), ("24 h", 86400), ("7 d", 604800))
        )
        + "</p>"
    )
    parts.append(
        f'<p class="note">window {secs(window) if window else "all time"} · '
        f"{num(o.get('jobs'))} jobs · wait P50 {secs(o.get('wait_p50_s'))} · "
        f"P99 {secs(o.get('wait_p99_s'))} · JCT P50 {secs(o.get('jct_p50_s'))}</p>"
    )
    for dim, title in (
        ("team", "Teams"),
        ("pool", "Pools"),
        ("priority", "Priorities"),
        ("gpu_type", "GPU types"),
    ):
        rows = []
        for g in report.get("groups", {}).get(dim, []):
            ratio = g.get("p99_p50_ratio")
            ratio_cell = "-" if ratio is None else f"{ratio:.2f}"
            if ratio is not None and ratio > 2:
                ratio_cell = f"<b>{ratio_cell}</b>"
            rows.append(
                [
                    esc(g.get("key")),
                    num(g.get("jobs")),
                    secs(g.get("wait_p50_s")),
                    secs(g.get("wait_p99_s")),
                    ratio_cell,
                    secs(g.get("jct_p50_s")),
                ]
            )
        parts.append(f"<h2>{esc(title)}</h2>")
        parts.append(
            table(
                [dim, "jobs", "wait P50", "wait P99", "P99/P50", "JCT P50"],
                rows,
                numeric=(1, 2, 3, 4, 5),
                empty="no jobs in the window",
                table_id=f"fair-{dim}",
            )
        )
    return page("Fairness", "/ui/fairness", "".join(parts))


def _select(name: str, options: Sequence[str], current: str | None) -> str:
    opts = ['<option value="">any</option>'] + [
        f'<option value="{esc(o)}"{" selected" if o == current else ""}>{esc(o)}</option>'
        for o in options
    ]
    return f'<label>{esc(name)}<select name="{esc(name)}">{"".join(opts)}</select></label>'


def jobs_page(
    items: Sequence[Mapping[str, Any]],
    *,
    filters: Mapping[str, str | None],
    teams: Sequence[str] = (),
    pools: Sequence[str] = (),
    priorities: Sequence[str] = (),
    next_cursor: str | None = None,
) -> str:
    form = (
        '<form class="filters" method="get" action="/ui/jobs">'
        + _select("team", teams, filters.get("team"))
        + _select("pool", pools, filters.get("pool"))
        + _select("status", JOB_STATUSES, filters.get("status"))
        + _select("priority", priorities, filters.get("priority"))
        + '<button type="submit">filter</button></form>'
    )
    rows = []
    for j in items:
        allocs = j.get("allocations") or []
        where = ", ".join(sorted({f"{a.get('gpu_type') or 'cpu'}@{a.get('node')}" for a in allocs}))
        rows.append(
            [
                link(f"/ui/jobs/{j.get('id')}", str(j.get("id"))),
                esc(j.get("name")),
                esc(j.get("team")),
                esc(j.get("pool")),
                esc(j.get("priority")),
                status(j.get("status")),
                secs(j.get("wait_seconds")),
                num(j.get("units")),
                esc(where) if where else esc(j.get("reason")),
            ]
        )
    more = ""
    if next_cursor:
        more = "<p>" + link("/ui/jobs", "next page", cursor=next_cursor, **filters) + "</p>"
    body = (
        form
        + table(
            ["job", "name", "team", "pool", "priority", "status", "waited", "CU", "where / reason"],
            rows,
            numeric=(6, 7),
            empty="no jobs match",
            table_id="jobs",
        )
        + more
    )
    return page("Jobs", "/ui/jobs", body)


def job_page(job: Mapping[str, Any], events: Sequence[Mapping[str, Any]]) -> str:
    fields = [
        ("status", status(job.get("status"))),
        ("reason", esc(job.get("reason"))),
        ("team", esc(job.get("team"))),
        ("pool", esc(job.get("pool"))),
        ("priority", esc(job.get("priority"))),
        ("submitted", esc(job.get("submitted_at"))),
        ("admitted", esc(job.get("admitted_at"))),
        ("started", esc(job.get("started_at"))),
        ("finished", esc(job.get("finished_at"))),
        ("waited", secs(job.get("wait_seconds"))),
        ("preemptions", num(job.get("preemption_count"))),
        ("CU", num(job.get("units"))),
    ]
    allocs = [
        [
            num(a.get("replica")),
            esc(a.get("node")),
            esc(a.get("gpu_type")),
            esc(a.get("gpus")),
            esc(a.get("mig")),
            num(a.get("units")) + (" (released)" if a.get("released") else ""),
        ]
        for a in job.get("allocations") or []
    ]
    ev = [
        [
            esc(e.get("at")),
            esc(e.get("type")),
            esc(e.get("from_status")),
            esc(e.get("to_status")),
            esc(e.get("reason")),
        ]
        for e in events
    ]
    body = (
        table(["field", "value"], fields, table_id="job")
        + "<h2>Allocations</h2>"
        + table(
            ["replica", "node", "type", "gpus", "mig", "CU"], allocs, numeric=(0, 5), empty="none"
        )
        + "<h2>History</h2>"
        + table(["at", "event", "from", "to", "reason"], ev, empty="no events")
    )
    return page(f"Job {job.get('id')} · {job.get('name')}", "/ui/jobs", body)


def tuning_page(state: Mapping[str, Any], history: Sequence[Mapping[str, Any]]) -> str:
    cfg = state.get("config") or {}
    weights = state.get("weights") or {}
    base = state.get("base_weights") or {}
    wrows = [[esc(t), num(w), num(base.get(t, w))] for t, w in sorted(weights.items())]
    last = state.get("last_decision") or {}
    hrows = []
    for h in history:
        changes = ", ".join(
            f"{c['gpu_type']} {c['old']:g}→{c['new']:g}" for c in h.get("changes", [])
        )
        triggers = "; ".join(t.get("message", "") for t in h.get("triggers", []))
        hrows.append(
            [
                esc(h.get("at_iso") or h.get("at")),
                esc(h.get("action")),
                esc(triggers),
                esc(changes),
                esc(h.get("message")),
            ]
        )
    body = (
        f"<p>mode <b>{esc(cfg.get('mode'))}</b> · cooldown {secs(cfg.get('cooldown_s'))} · "
        f"max step {pct(cfg.get('max_step'))} · hysteresis {secs(cfg.get('hysteresis_s'))}</p>"
        + (
            f'<p class="note">last evaluation: {esc(last.get("action"))} — '
            f"{esc(last.get('message'))}</p>"
            if last
            else ""
        )
        + "<h2>GPU type weights (CU per card)</h2>"
        + table(["type", "current", "configured"], wrows, numeric=(1, 2), table_id="weights")
        + "<h2>Proposals and changes</h2>"
        + table(
            ["at", "action", "trigger", "changes", "figures"],
            hrows,
            empty="no proposals yet",
            table_id="tuning-history",
        )
    )
    return page("Weight tuner", "/ui/tuning", body)

"""The `gpuq` command line.

Each command imports its module lazily so `gpuq --help` stays fast and a
client command does not load the server.
"""

from __future__ import annotations

import typer

# Plain click help (rich_markup_mode=None): options read "--file FILE", "--token TOKEN",
# flags show no type; typer's rich panels printed "<bool>" beside every flag and --help.
PLAIN = {"rich_markup_mode": None}
app = typer.Typer(no_args_is_help=True, help="gpuq: a fair GPU batch queue for Kubernetes",
                  **PLAIN)  # type: ignore[arg-type]
db_app = typer.Typer(no_args_is_help=True, help="Database commands", **PLAIN)  # type: ignore[arg-type]
app.add_typer(db_app, name="db")
config_app = typer.Typer(no_args_is_help=True, help="The config file (one source of admin truth)",
                         **PLAIN)  # type: ignore[arg-type]
app.add_typer(config_app, name="config")


#: the policy names of ``--policy`` (kept equal to app.simulate.all_policies.POLICY_NAMES and
#: app.simulate.fill.FILL_POLICIES by tests/unit/test_cli_help.py; not imported, so
#: ``gpuq --help`` does not load the simulator)
SIM_POLICIES = "gpuq, fifo-count, fifo-typed, random, bestfit, kueue, volcano, slurm"
FILL_POLICIES = "random, bestfit, fgd, gpuq"


@app.command()
def simulate(
    scenario: str = typer.Argument(..., metavar="SCENARIO",
                                   help="scenario YAML (config + jobs or trace)"),
    policy: str = typer.Option("gpuq", metavar="POLICY", help=f"one of: {SIM_POLICIES}; "
                               f"with --protocol fill: {FILL_POLICIES}"),
    settings: str | None = typer.Option(
        None, metavar="K=V,...", help="a baseline's operator settings, as the evaluation "
        "reports them, e.g. --policy kueue --settings 'flavor_order=fastest, nominal=cohort'"),
    seed: int = typer.Option(42, metavar="N", help="random seed"),
    out: str | None = typer.Option(None, metavar="FILE", help="write the result JSON here"),
    report: str | None = typer.Option(None, metavar="DIR",
                                      help="write a Markdown report and plots here"),
    protocol: str | None = typer.Option(None, metavar="fill",
                                        help="'fill' for the FGD fill protocol"),
    inflate: float = typer.Option(1.3, metavar="X",
                                  help="fill protocol: arrive up to this share of capacity"),
    seeds: str | None = typer.Option(None, metavar="SEEDS",
                                     help="fill protocol: seeds, e.g. 42..51 or 1,2,3"),
    trace_dir: str | None = typer.Option(
        None, "--trace-dir", envvar="GPUQ_TRACE_DIR", metavar="DIR",
        help="folder holding the traces, for trace paths not found beside the scenario",
    ),
) -> None:
    """Replay a scenario through the scheduling core in virtual time.

    \b
    Examples:
      make traces      # the evaluation's public traces into eval/traces/
      gpuq simulate eval/philly-day.yaml --policy kueue --out kueue.json
      gpuq simulate eval/openb-default.yaml --protocol fill --seeds 42..44 --policy fgd
    """
    from app.simulate.command import run_simulate

    raise typer.Exit(
        run_simulate(
            scenario,
            policy=policy,
            settings=settings,
            seed=seed,
            out=out,
            report=report,
            protocol=protocol,
            inflate=inflate,
            seeds=seeds,
            trace_dir=trace_dir,
        )
    )


@app.command()
def serve(
    config: str | None = typer.Option(None, metavar="FILE",
                                      help="config YAML (default: GPUQ_CONFIG or the demo)"),
    port: int | None = typer.Option(None, metavar="PORT",
                                    help="HTTP port (default: GPUQ_PORT or 8000)"),
    host: str | None = typer.Option(None, metavar="ADDRESS",
                                    help="bind address (default: GPUQ_HOST)"),
) -> None:
    """API + dispatcher in one process (embedded PostgreSQL unless DATABASE_URL is set)."""
    from app.server import run_server, with_overrides
    from app.settings import get_settings

    run_server(with_overrides(get_settings(), config, port, host), with_loops=True)


@app.command()
def api(
    port: int | None = typer.Option(None, metavar="PORT", help="HTTP port"),
    host: str | None = typer.Option(None, metavar="ADDRESS", help="bind address"),
) -> None:
    """Only the REST API (run `gpuq dispatcher` next to it)."""
    from app.server import run_server, with_overrides
    from app.settings import get_settings

    run_server(with_overrides(get_settings(), None, port, host), with_loops=False)


@app.command()
def dispatcher(
    config: str | None = typer.Option(None, metavar="FILE", help="config YAML to apply at start"),
) -> None:
    """Only the loops (dispatcher), no HTTP."""
    from app.server import run_dispatcher, with_overrides
    from app.settings import get_settings

    run_dispatcher(with_overrides(get_settings(), config, None, None))


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply database migrations (to DATABASE_URL, or the embedded database)."""
    from app.server import db_upgrade as run_upgrade
    from app.settings import get_settings

    rev = run_upgrade(get_settings())
    typer.echo(f"database at revision {rev}")


@config_app.command("apply")
def config_apply(
    file: str = typer.Argument(..., metavar="FILE",
                               help="config YAML (format: docs/configuration.md)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the diff, change nothing"),
) -> None:
    """Apply FILE to the database (DATABASE_URL, or the embedded one): show the diff,
    then make every object it names managed by it (API writes to those get 409)."""
    from pydantic import ValidationError

    from app.domain.config import validation_problems
    from app.domain.errors import error_block, error_line
    from app.server import config_apply as run_apply
    from app.settings import get_settings

    try:
        lines = run_apply(get_settings(), file, dry_run=dry_run)
    except ValidationError as e:  # checked before the database is opened
        typer.echo(error_block(f"invalid config {file}", validation_problems(e)), err=True)
        raise typer.Exit(2) from None
    except (OSError, ValueError) as e:  # unreadable, over a bound (YAML), or invalid
        typer.echo(error_line(e), err=True)
        raise typer.Exit(2) from None
    changed = [ln for ln in lines if not ln.startswith("=")]
    for line in changed:
        typer.echo(line)
    typer.echo(
        f"{len(changed)} change(s), {len(lines) - len(changed)} unchanged"
        + (" (dry run: nothing written)" if dry_run else "")
    )


# -- client commands (talk to a running gpuq over REST; see app/client_cli.py) ---------------

_URL = typer.Option(None, "--url", envvar="GPUQ_URL", metavar="URL",
                    help="gpuq server URL (default http://127.0.0.1:8000)")
_TOKEN = typer.Option(None, "--token", envvar="GPUQ_TOKEN", metavar="TOKEN",
                      help="API token (a team's, or the admin token)")
_OUT = typer.Option("table", "-o", "--output", metavar="FORMAT", help="table, json or yaml")
_ID = typer.Argument(..., metavar="JOB_ID", help="job id (gpuq jobs)")

JOB_FIELDS = """\b
Job file fields (docs/api.md, POST /v1/jobs):
  name        a DNS label; names the job's Pods
  team        your team
  pool        optional: one of the team's pools (default: the team's pool)
  priority    optional: P0 (never preempted), P1, P2 (default: the team's)
  replicas, min_available   a gang: N replicas, start when min_available fit
  resources   gpus | gpu_units | mig | gpu_share (one of them), min_gpu_memory_gb,
              gpu_types, avoid_gpu_types, cpu, memory_gb (per replica)
  placement, topology       binpack | spread; none | same_node | same_rack | fast_network
  duration_estimate_s       expected run time (better estimates, shorter waits)
  pod_template              optional Pod template (validated; docs/security.md)
"""


@app.command(epilog=JOB_FIELDS)
def submit(
    file: str = typer.Option(..., "-f", "--file", metavar="FILE",
                             help="job spec YAML/JSON: one job or a list ('-' for stdin)"),
    idempotency_key: str | None = typer.Option(
        None, metavar="KEY", help="Idempotency-Key (default: a hash of the team and the job)"),
    new: bool = typer.Option(False, "--new", help="submit another copy even if this exact "
                             "job was submitted before (sends no Idempotency-Key)"),
    wait: bool = typer.Option(False, "--wait", help="wait until the job runs or ends "
                              "(exit 0 running/succeeded, 1 failed/unschedulable, 3 timeout)"),
    timeout: float | None = typer.Option(None, metavar="SECONDS", help="with --wait: give up "
                                         "after this long"),
    interval: float = typer.Option(2.0, metavar="SECONDS", help="with --wait: poll interval"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Submit a job (or a list of jobs) from a file.

    Submitting the same one-job file twice returns the first job ("already submitted"):
    the Idempotency-Key is a hash of the team and the job. Use --new for another copy.
    A list is one all-or-nothing batch without a key: submitting it again makes new jobs.

    \b
    Examples:
      gpuq submit -f k8s/examples/job-pod-template.yaml
      gpuq submit -f train.yaml --wait --timeout 600
      gpuq submit -f train.yaml --new -o json
    """
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_submit, file, idempotency_key, url=url, token=token, new=new,
                           wait=wait, timeout_s=timeout, poll_s=interval, output=output))


@app.command()
def jobs(
    team: str | None = typer.Option(None, metavar="TEAM", help="only this team"),
    pool: str | None = typer.Option(None, metavar="POOL", help="only this pool"),
    status: str | None = typer.Option(
        None, metavar="STATUS", help="only this status: pending, admitted, running, "
        "succeeded, failed, cancelled, unschedulable"),
    priority: str | None = typer.Option(None, metavar="PRIORITY", help="only this priority"),
    limit: int = typer.Option(50, metavar="N", help="at most this many"),
    cursor: str | None = typer.Option(None, metavar="CURSOR",
                                      help="the next page (printed after a full page)"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """List jobs, newest first, a page at a time (an unknown team, pool or priority is
    an error, exit 1).

    \b
    Examples:
      gpuq jobs --team nlp --status pending
      gpuq jobs -o yaml --limit 5
    """
    from app import client_cli as c

    raise typer.Exit(
        c.run(
            c.cmd_jobs,
            url=url,
            token=token,
            team=team,
            pool=pool,
            status=status,
            priority=priority,
            limit=limit,
            cursor=cursor,
            output=output,
        )
    )


@app.command()
def job(
    job_id: str = _ID,
    events: bool = typer.Option(False, "--events", help="also list the job's events"),
    follow: bool = typer.Option(False, "--follow", help="print events as they happen until "
                                "the job ends (exit 0 succeeded, 1 otherwise)"),
    timeout: float | None = typer.Option(None, metavar="SECONDS",
                                         help="with --follow: give up after this long"),
    interval: float = typer.Option(2.0, metavar="SECONDS", help="with --follow: poll interval"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Show one job: what it asked for, status, reason, times, allocations, lease.

    \b
    Examples:
      gpuq job 12 --events
      gpuq job 12 --follow
    """
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_job, job_id, output, url=url, token=token, events=events,
                           follow=follow, poll_s=interval, timeout_s=timeout))


@app.command()
def queue(
    pool: str | None = typer.Option(None, metavar="POOL", help="only this pool"),
    team: str | None = typer.Option(None, metavar="TEAM", help="only this team"),
    limit: int | None = typer.Option(None, metavar="N",
                                     help="at most this many (server default 100)"),
    cursor: str | None = typer.Option(None, metavar="CURSOR",
                                      help="the next page (printed after a full page)"),
    watch: bool = typer.Option(False, "--watch", help="redraw every --interval seconds"),
    interval: float = typer.Option(2.0, metavar="SECONDS", help="with --watch: redraw interval"),
    count: int = typer.Option(0, metavar="N", help="with --watch: stop after N draws (0: never)"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Pending jobs in dispatch order, with why each waits and the estimated start.

    \b
    Examples:
      gpuq queue --team nlp
      gpuq queue --watch --interval 5
    """
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_queue, url=url, token=token, pool=pool, team=team,
                           limit=limit, cursor=cursor, output=output, watch=watch,
                           interval_s=interval, count=count))


@app.command()
def cancel(
    job_id: str = _ID,
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Cancel a job (pending, admitted, running or unschedulable)."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_cancel, job_id, output, url=url, token=token))


@app.command()
def usage(
    team: str | None = typer.Option(None, metavar="TEAM",
                                    help="a team's usage against its quota, per GPU type"),
    pool: str | None = typer.Option(None, metavar="POOL",
                                    help="a pool's guaranteed/used/borrowed/lent"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Per GPU type allocation (or one team's / pool's usage).

    \b
    Examples:
      gpuq usage
      gpuq usage --team nlp
      gpuq usage --pool training -o json
    """
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_usage, url=url, token=token, team=team, pool=pool,
                           output=output))


nodes_app = typer.Typer(no_args_is_help=True, help="Nodes: list, cordon, drain, uncordon",
                        **PLAIN)  # type: ignore[arg-type]
app.add_typer(nodes_app, name="nodes")
_NODE = typer.Argument(..., metavar="NODE", help="node name (gpuq nodes list)")
_REASON = typer.Option(None, "--reason", metavar="TEXT",
                       help="why (shown on the node and in the audit trail)")


@nodes_app.command("list")
def nodes_list(output: str = _OUT, url: str | None = _URL, token: str | None = _TOKEN) -> None:
    """Every node: GPU type, cards free, and whether it takes new jobs (cordoned, draining)."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_nodes_list, url=url, token=token, output=output))


@nodes_app.command("cordon")
def nodes_cordon(node: str = _NODE, reason: str | None = _REASON, output: str = _OUT,
                 url: str | None = _URL, token: str | None = _TOKEN) -> None:
    """Admin: no new jobs on NODE (what runs there keeps running). Works on every node,
    whoever defined it; a config apply or node sync leaves it cordoned.

    \b
    Example:
      gpuq nodes cordon a100-0 --reason "replacing a fan"
    """
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_node_action, node, "cordon", reason, output, url=url,
                           token=token))


@nodes_app.command("drain")
def nodes_drain(node: str = _NODE, reason: str | None = _REASON, output: str = _OUT,
                url: str | None = _URL, token: str | None = _TOKEN) -> None:
    """Admin: cordon NODE and stop the jobs running there; the dispatcher requeues them
    (with their submit time) within a few seconds. `gpuq nodes uncordon` ends it."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_node_action, node, "drain", reason, output, url=url,
                           token=token))


@nodes_app.command("uncordon")
def nodes_uncordon(node: str = _NODE, output: str = _OUT, url: str | None = _URL,
                   token: str | None = _TOKEN) -> None:
    """Admin: NODE takes new jobs again (ends a drain too)."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_node_action, node, "uncordon", None, output, url=url,
                           token=token))


tokens_app = typer.Typer(no_args_is_help=True, help="API tokens (admin)", **PLAIN)  # type: ignore[arg-type]
app.add_typer(tokens_app, name="tokens")
_TOKEN_ID = typer.Argument(..., metavar="TOKEN_ID", help="token id (gpuq tokens list)")


@tokens_app.command("list")
def tokens_list(
    team: str | None = typer.Option(None, metavar="TEAM", help="only this team's"),
    limit: int | None = typer.Option(None, metavar="N",
                                     help="at most this many (the server's page: 500)"),
    cursor: str | None = typer.Option(None, metavar="CURSOR",
                                      help="the next page, from the last answer"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Every token (never its value): name, scope, state, expiry; a page at a time."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_list, url=url, token=token, team=team, output=output,
                           limit=limit, cursor=cursor))


@tokens_app.command("create")
def tokens_create(
    scope: str = typer.Argument(..., metavar="SCOPE",
                                help="admin, team:<name>, team:<name>:read or metrics "
                                "(GET /metrics only, for Prometheus)"),
    name: str | None = typer.Option(None, metavar="NAME",
                                    help="who or what uses it (recorded as submitted_by)"),
    expires_in: float | None = typer.Option(None, metavar="SECONDS",
                                            help="seconds until it stops working"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """A new token; its value is printed once.

    \b
    Examples:
      gpuq tokens create team:nlp --name ci-runner --expires-in 2592000
      gpuq tokens create metrics --name prometheus
    """
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_create, scope, url=url, token=token, name=name,
                           expires_in_s=expires_in, output=output))


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: int = _TOKEN_ID,
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Revoke a token: 401 from now on, on every API replica."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_revoke, token_id, output, url=url, token=token))


@tokens_app.command("reset-admin")
def tokens_reset_admin() -> None:
    """Break-glass: with database access (DATABASE_URL, or the embedded database),
    revoke every admin token and print one new admin token (shown once)."""
    from app.runtime import kept_admin_token_path
    from app.server import reset_admin_token
    from app.settings import get_settings

    settings = get_settings()
    token = reset_admin_token(settings)
    kept = kept_admin_token_path(settings)
    typer.echo("every admin token is revoked; the new admin token"
               + (f" (also written to {kept}):" if kept else " (shown once):"))
    typer.echo(token)


@tokens_app.command("rotate")
def tokens_rotate(
    token_id: int = _TOKEN_ID,
    expires_in: float | None = typer.Option(None, metavar="SECONDS",
                                            help="seconds until the new one expires"),
    output: str = _OUT,
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Revoke a token and print its successor (same name and scope)."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_rotate, token_id, url=url, token=token,
                           expires_in_s=expires_in, output=output))


def main(argv: list[str] | None = None) -> None:
    """Run ``gpuq``; every error is one line, ``gpuq: error: <detail>`` (usage mistakes
    too, instead of a boxed panel), and never a traceback unless ``GPUQ_DEBUG`` is set."""
    import os
    import sys

    from app.domain.errors import error_line

    try:
        code = app(args=argv, prog_name="gpuq", standalone_mode=False)
    except typer.Abort:
        print(error_line("aborted"), file=sys.stderr)
        code = 1
    except Exception as e:
        ctx = getattr(e, "ctx", None)
        if type(e).__name__ == "NoArgsIsHelpError" and ctx is not None:
            print(ctx.get_help())  # bare `gpuq` or `gpuq tokens`: the help, as before
            code = 0
        elif hasattr(e, "format_message") and hasattr(e, "exit_code"):  # usage errors
            where = f" (see {ctx.command_path} --help)" if ctx is not None else ""
            print(error_line(e.format_message() + where), file=sys.stderr)
            code = e.exit_code
        elif os.environ.get("GPUQ_DEBUG"):
            raise
        else:
            print(error_line(f"{type(e).__name__}: {e} (GPUQ_DEBUG=1 shows the traceback)"),
                  file=sys.stderr)
            code = 1
    sys.exit(code or 0)


if __name__ == "__main__":
    main()

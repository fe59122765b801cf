"""The `gpuq` command line.

Each command imports its module lazily so `gpuq --help` stays fast and a
client command does not load the server.
"""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="gpuq: a fair GPU batch queue for Kubernetes")
db_app = typer.Typer(no_args_is_help=True, help="Database commands")
app.add_typer(db_app, name="db")
config_app = typer.Typer(no_args_is_help=True, help="The config file (one source of admin truth)")
app.add_typer(config_app, name="config")


@app.command()
def simulate(
    scenario: str = typer.Argument(..., help="scenario YAML (config + jobs or trace)"),
    policy: str = typer.Option("gpuq", help="scheduling policy by name"),
    seed: int = typer.Option(42, help="random seed"),
    out: str | None = typer.Option(None, help="write the result JSON here"),
    report: str | None = typer.Option(None, help="write a Markdown report and plots here"),
    protocol: str | None = typer.Option(None, help="'fill' for the FGD fill protocol"),
    inflate: float = typer.Option(1.3, help="fill protocol: arrive up to this share of capacity"),
    seeds: str | None = typer.Option(None, help="fill protocol: seeds, e.g. 42..51 or 1,2,3"),
    trace_dir: str | None = typer.Option(
        None, "--trace-dir", envvar="GPUQ_TRACE_DIR",
        help="folder holding the traces, for trace paths not found beside the scenario",
    ),
) -> None:
    """Replay a scenario through the scheduling core in virtual time."""
    from app.simulate.command import run_simulate

    raise typer.Exit(
        run_simulate(
            scenario,
            policy=policy,
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
    config: str | None = typer.Option(None, help="config YAML (default: GPUQ_CONFIG or the demo)"),
    port: int | None = typer.Option(None, help="HTTP port (default: GPUQ_PORT or 8000)"),
    host: str | None = typer.Option(None, help="bind address (default: GPUQ_HOST)"),
) -> None:
    """API + dispatcher in one process (embedded PostgreSQL unless DATABASE_URL is set)."""
    from app.server import run_server, with_overrides
    from app.settings import get_settings

    run_server(with_overrides(get_settings(), config, port, host), with_loops=True)


@app.command()
def api(
    port: int | None = typer.Option(None, help="HTTP port"),
    host: str | None = typer.Option(None, help="bind address"),
) -> None:
    """Only the REST API (run `gpuq dispatcher` next to it)."""
    from app.server import run_server, with_overrides
    from app.settings import get_settings

    run_server(with_overrides(get_settings(), None, port, host), with_loops=False)


@app.command()
def dispatcher(
    config: str | None = typer.Option(None, help="config YAML to apply at start"),
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
    file: str = typer.Argument(..., help="config YAML (format: docs/configuration.md)"),
    dry_run: bool = typer.Option(False, "--dry-run", help="show the diff, change nothing"),
) -> None:
    """Apply FILE to the database (DATABASE_URL, or the embedded one): show the diff,
    then make every object it names managed by it (API writes to those get 409)."""
    from app.server import config_apply as run_apply
    from app.settings import get_settings

    lines = run_apply(get_settings(), file, dry_run=dry_run)
    changed = [ln for ln in lines if not ln.startswith("=")]
    for line in changed:
        typer.echo(line)
    typer.echo(
        f"{len(changed)} change(s), {len(lines) - len(changed)} unchanged"
        + (" (dry run: nothing written)" if dry_run else "")
    )


# -- client commands (talk to a running gpuq over REST; see app/client_cli.py) ---------------

_URL = typer.Option(None, "--url", envvar="GPUQ_URL", help="gpuq server URL")
_TOKEN = typer.Option(None, "--token", envvar="GPUQ_TOKEN", help="API token")


@app.command()
def submit(
    file: str = typer.Option(..., "-f", "--file", help="job spec YAML/JSON ('-' for stdin)"),
    idempotency_key: str | None = typer.Option(None, help="Idempotency-Key header"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Submit a job (or a list of jobs) from a file."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_submit, file, idempotency_key, url=url, token=token))


@app.command()
def jobs(
    team: str | None = typer.Option(None, help="only this team"),
    pool: str | None = typer.Option(None, help="only this pool"),
    status: str | None = typer.Option(None, help="only this status"),
    priority: str | None = typer.Option(None, help="only this priority"),
    limit: int = typer.Option(50, help="at most this many"),
    cursor: str | None = typer.Option(None, help="the next page (printed after a full page)"),
    output: str = typer.Option("table", "-o", "--output", help="table or json"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """List jobs, newest first, a page at a time."""
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
    job_id: str = typer.Argument(..., help="job id"),
    output: str = typer.Option("table", "-o", "--output", help="table or json"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Show one job: status, reason, times, allocations, lease."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_job, job_id, output, url=url, token=token))


@app.command()
def queue(
    pool: str | None = typer.Option(None, help="only this pool"),
    team: str | None = typer.Option(None, help="only this team"),
    limit: int | None = typer.Option(None, help="at most this many (server default 100)"),
    cursor: str | None = typer.Option(None, help="the next page (printed after a full page)"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Pending jobs in dispatch order, with why each waits and the estimated start."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_queue, url=url, token=token, pool=pool, team=team,
                           limit=limit, cursor=cursor))


@app.command()
def cancel(
    job_id: str = typer.Argument(..., help="job id"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Cancel a job."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_cancel, job_id, url=url, token=token))


@app.command()
def usage(
    team: str | None = typer.Option(None, help="a team's usage against its quota"),
    pool: str | None = typer.Option(None, help="a pool's guaranteed/used/borrowed/lent"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Per GPU type allocation (or one team's / pool's usage)."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_usage, url=url, token=token, team=team, pool=pool))


tokens_app = typer.Typer(no_args_is_help=True, help="API tokens (admin)")
app.add_typer(tokens_app, name="tokens")


@tokens_app.command("list")
def tokens_list(
    team: str | None = typer.Option(None, help="only this team's"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Every token (never its value): name, scope, state, expiry."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_list, url=url, token=token, team=team))


@tokens_app.command("create")
def tokens_create(
    scope: str = typer.Argument(..., help="admin, team:<name> or team:<name>:read"),
    name: str | None = typer.Option(None, help="who or what uses it (recorded as submitted_by)"),
    expires_in: float | None = typer.Option(None, help="seconds until it stops working"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """A new token; its value is printed once."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_create, scope, url=url, token=token, name=name,
                           expires_in_s=expires_in))


@tokens_app.command("revoke")
def tokens_revoke(
    token_id: int = typer.Argument(..., help="token id (gpuq tokens list)"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Revoke a token: 401 from now on, on every API replica."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_revoke, token_id, url=url, token=token))


@tokens_app.command("reset-admin")
def tokens_reset_admin() -> None:
    """Break-glass: with database access (DATABASE_URL, or the embedded database),
    revoke every admin token and print one new admin token (shown once)."""
    from app.server import reset_admin_token
    from app.settings import get_settings

    token = reset_admin_token(get_settings())
    typer.echo("every admin token is revoked; the new admin token (shown once):")
    typer.echo(token)


@tokens_app.command("rotate")
def tokens_rotate(
    token_id: int = typer.Argument(..., help="token id (gpuq tokens list)"),
    expires_in: float | None = typer.Option(None, help="seconds until the new one expires"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Revoke a token and print its successor (same name and scope)."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_tokens_rotate, token_id, url=url, token=token,
                           expires_in_s=expires_in))


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

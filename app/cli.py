"""The `gpuq` command line.

Each command imports its module lazily so `gpuq --help` stays fast and a
client command does not load the server.
"""

from __future__ import annotations

import typer

app = typer.Typer(no_args_is_help=True, help="gpuq: a fair GPU batch queue for Kubernetes")
db_app = typer.Typer(no_args_is_help=True, help="Database commands")
app.add_typer(db_app, name="db")


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
    output: str = typer.Option("table", "-o", "--output", help="table or json"),
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """List jobs."""
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
    url: str | None = _URL,
    token: str | None = _TOKEN,
) -> None:
    """Pending jobs in dispatch order, with why each waits."""
    from app import client_cli as c

    raise typer.Exit(c.run(c.cmd_queue, url=url, token=token, pool=pool, team=team))


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


def main() -> None:
    app()


if __name__ == "__main__":
    main()

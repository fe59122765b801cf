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


def main() -> None:
    app()


if __name__ == "__main__":
    main()

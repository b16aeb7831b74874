"""``suanli server``: run the API server with its control loop."""

from __future__ import annotations

from pathlib import Path

import typer

#: Same as ``suanli.api.server.DEFAULT_PORT`` (not imported: it loads the web stack).
DEFAULT_PORT = 8470


def server(
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (only loopback unless you say otherwise)."),
    port: int = typer.Option(DEFAULT_PORT, help="TCP port."),
    data_dir: Path = typer.Option(None, "--data-dir", help="Database, admin token and workspaces [default: ./.suanli or $SUANLI_DATA_DIR]."),
    db: str = typer.Option(None, "--db", help="Database URL, e.g. postgresql+psycopg://user@host/db [default: SQLite in the data dir]."),
) -> None:
    """Start the control plane: API, scheduler loop and local backend."""
    from suanli.api.server import default_data_dir, serve

    serve(host, port, data_dir or default_data_dir(), db, echo=typer.echo)

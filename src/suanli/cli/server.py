"""``suanli server``: run the API server with its control loop (a supervisor over a
worker process, the API's worker processes and the port proxy's: ``api.supervisor``);
``suanli server rotate-key``: a new secret key, every stored secret resealed, while the server runs."""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import typer

if TYPE_CHECKING:  # imported where used: they load the control plane
    from suanli.control.autostop import AutostopSettings
    from suanli.control.plane import MigrationSettings

#: Same as ``suanli.api.server.DEFAULT_PORT`` (not imported: it loads the web stack).
DEFAULT_PORT = 8470

HELP = "Start the control plane: API, scheduler loop, local backend (and a Slurm cluster with --backend slurm)."

app = typer.Typer(invoke_without_command=True, help=HELP, add_completion=False)

DATA_DIR_HELP = "Database, admin token and workspaces [default: ./.suanli or $SUANLI_DATA_DIR]."
DB_HELP = (
    "Database URL, e.g. postgresql+psycopg://user@host/db [default: $SUANLI_DB, else SQLite in the data dir]. "
    "A URL with a password is readable by every user of this host here: use $SUANLI_DB or --db-file."
)
DB_FILE_HELP = "A file (mode 0600) whose first line is the database URL: keeps a password out of argv."
KEY_FILE_HELP = (
    "Key file sealing workloads' secrets (mode 0600; a keyring or one base64 256-bit key) "
    "[default: $SUANLI_SECRET_KEY_FILE, else DATA_DIR/secret-key, created on first start]."
)


def _db_url(db: str | None, db_file: Path | None) -> str | None:
    from suanli.db import urls

    try:
        url, source = urls.resolve(db, db_file)
    except urls.DbUrlError as exc:
        raise typer.BadParameter(str(exc), param_hint="--db-file") from None
    if source == "--db" and url and urls.has_password(url):
        typer.echo(
            "WARNING: --db carries a password, which every user of this host can read in the process list; "
            f"pass it in ${urls.DB_ENV} or --db-file instead",
            err=True,
        )
    return url


@app.callback()
def server(
    ctx: typer.Context,
    host: str = typer.Option("127.0.0.1", help="Interface to listen on (only loopback unless you say otherwise)."),
    port: int = typer.Option(DEFAULT_PORT, help="TCP port."),
    proxy_port: int = typer.Option(
        None,
        "--proxy-port",
        help="TCP port of the port proxy (instances' published "
        "ports, on an origin apart from the console's) [default: PORT + 1].",
    ),
    proxy_domain: str = typer.Option(
        "localhost",
        "--proxy-domain",
        help="Each published port is served at "
        "http://ID-PORT.DOMAIN:PROXY_PORT/, an origin of its own; localhost works for "
        "browsers on this machine, renters elsewhere need a wildcard DNS name "
        "(*.DOMAIN -> this server).",
    ),
    data_dir: Path = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    db_file: Path = typer.Option(None, "--db-file", dir_okay=False, help=DB_FILE_HELP),
    secret_key_file: Path = typer.Option(
        None, "--secret-key-file", envvar="SUANLI_SECRET_KEY_FILE", dir_okay=False, help=KEY_FILE_HELP
    ),
    tls_cert: Path = typer.Option(
        None, "--tls-cert", dir_okay=False, help="PEM certificate (chain): serve the API and the port proxy over HTTPS."
    ),
    tls_key: Path = typer.Option(None, "--tls-key", dir_okay=False, help="PEM private key of --tls-cert."),
    backend: list[str] = typer.Option(["local"], "--backend", help="Backends to drive: local (always on) and/or slurm."),
    slurm_conf: Path = typer.Option(
        None, "--slurm-conf", dir_okay=False, help="slurm.conf of the Slurm cluster [default: $SLURM_CONF]."
    ),
    notice: float = typer.Option(300.0, "--notice", min=0, help="Spot reclaim notice in seconds (SIGUSR1, then SIGTERM)."),
    migration_moves: int = typer.Option(
        0,
        "--migration-moves",
        min=0,
        help="Move at most this many running GPU-share jobs (with a checkpoint_dir; after the --notice) to make room "
        "for whole-GPU work that scattered free capacity keeps waiting; 0: never.",
    ),
    migration_planner: str = typer.Option(
        "direct", "--migration-planner", help="direct (single moves) or repack (chains of moves, CP-SAT)."
    ),
    heartbeat_timeout: float = typer.Option(
        15.0,
        "--heartbeat-timeout",
        min=0.1,
        help="A node whose agent (`suanli nodes heartbeat`) is silent this long is down; its work fails over.",
    ),
    runtime: str = typer.Option(
        "auto",
        "--runtime",
        envvar="SUANLI_RUNTIME",
        help="How the local backend runs workloads: container (Podman or "
        "Docker Engine), process (host processes, NO isolation), or auto (containers where an engine answers).",
    ),
    allow_process_runtime: bool = typer.Option(
        False,
        "--allow-process-runtime",
        envvar="SUANLI_ALLOW_PROCESS_RUNTIME",
        help="Let tenants other than the operator's run on the process runtime (no isolation between them or from this host).",
    ),
    ssh_bind: str = typer.Option(
        "127.0.0.1", "--ssh-bind", help="Address instances' SSH ports listen on (0.0.0.0 for renters on other machines)."
    ),
    ssh_host: str = typer.Option(
        None, "--ssh-host", help="Host name renters' ssh command uses [default: the SSH address, or 127.0.0.1]."
    ),
    max_upload_mib: int = typer.Option(100, "--max-upload-mib", min=1, help="Largest job workdir upload, MiB."),
    audit: bool = typer.Option(
        True, "--audit/--no-audit", help="Record every state-changing call in the audit log (off: only to measure its cost)."
    ),
    audit_retention_days: int = typer.Option(
        2557, "--audit-retention-days", min=1, max=36600, help="Delete audit records older than this (seed 004: seven years)."
    ),
    metrics_interval: float = typer.Option(
        15.0, "--metrics-interval", min=1.0, max=3600.0, help="Seconds between samples of running work's CPU, memory and GPU."
    ),
    metrics_retention_days: float = typer.Option(
        30.0,
        "--metrics-retention-days",
        min=0.01,
        max=3660.0,
        help="Delete metrics older than this (raw samples become 5-minute averages after an hour).",
    ),
    autostop_default: str = typer.Option(
        None,
        "--autostop-default",
        help="Stop instances idle this long (e.g. 2h) unless they or their tenant say otherwise [default: never].",
    ),
    autostop_min: str = typer.Option(
        "5m", "--autostop-min", help="The shortest idle auto-stop window a renter may ask for (e.g. 5m)."
    ),
    workers: int = typer.Option(
        None,
        "--workers",
        min=1,
        help="API worker processes (the control loop, billing and metrics run in a worker process of their own) "
        "[default: one per core].",
    ),
) -> None:
    """Start the control plane: API, scheduler loop, local backend (and a Slurm cluster with --backend slurm)."""
    if ctx.invoked_subcommand is not None:
        return
    from suanli.api.server import default_data_dir, serve
    from suanli.api.tls import Tls
    from suanli.control.metrics import MetricsSettings

    try:
        tls = Tls.of(tls_cert, tls_key)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--tls-cert/--tls-key") from None

    if runtime not in ("auto", "container", "process"):
        raise typer.BadParameter(f"unknown runtime {runtime!r}; choose auto, container or process", param_hint="--runtime")
    proxy_domain = proxy_domain.strip().lower().rstrip(".")
    if not re.fullmatch(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*", proxy_domain):
        raise typer.BadParameter(
            f"{proxy_domain!r} is not a DNS name (e.g. proxy.example.com; no scheme or port)", param_hint="--proxy-domain"
        )
    unknown = sorted(set(backend) - {"local", "slurm"})
    if unknown:
        raise typer.BadParameter(f"unknown backend(s) {', '.join(unknown)}; choose local or slurm", param_hint="--backend")
    conf = None
    if "slurm" in backend:
        import os

        conf = slurm_conf or (Path(os.environ["SLURM_CONF"]) if os.environ.get("SLURM_CONF") else Path("/etc/slurm/slurm.conf"))
        if not conf.is_file():
            raise typer.BadParameter(f"{conf} is not a file; pass the cluster's slurm.conf", param_hint="--slurm-conf")
    serve(
        host,
        port,
        data_dir or default_data_dir(),
        _db_url(db, db_file),
        echo=typer.echo,
        slurm_conf=conf,
        notice_s=notice,
        migration=_migration(migration_moves, migration_planner),
        heartbeat_timeout_s=heartbeat_timeout,
        runtime=runtime,
        allow_process_runtime=allow_process_runtime,
        ssh_bind=ssh_bind,
        ssh_host=ssh_host,
        max_upload_mib=max_upload_mib,
        audit=audit,
        audit_retention_days=audit_retention_days,
        proxy_port=proxy_port,
        proxy_domain=proxy_domain,
        tls=tls,
        secret_key_file=secret_key_file,
        metrics=MetricsSettings(interval_s=metrics_interval, retention_days=metrics_retention_days),
        autostop=_autostop(autostop_default, autostop_min),
        workers=workers,
    )


def _migration(moves: int, planner: str) -> MigrationSettings:
    from suanli.control.plane import MigrationSettings

    try:
        return MigrationSettings(moves=moves, planner=planner)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--migration-planner") from None


def _autostop(default: str | None, minimum: str) -> AutostopSettings:
    from suanli.bounds import parse_duration
    from suanli.control.autostop import AutostopSettings

    try:
        low = parse_duration(minimum)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--autostop-min") from None
    try:
        return AutostopSettings(default_s=parse_duration(default) if default else None, min_s=max(1, low))
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--autostop-default") from None


@app.command("rotate-key")
def rotate_key(
    data_dir: Path = typer.Option(None, "--data-dir", help=DATA_DIR_HELP),
    db: str = typer.Option(None, "--db", help=DB_HELP),
    db_file: Path = typer.Option(None, "--db-file", dir_okay=False, help=DB_FILE_HELP),
    secret_key_file: Path = typer.Option(
        None, "--secret-key-file", envvar="SUANLI_SECRET_KEY_FILE", dir_okay=False, help=KEY_FILE_HELP
    ),
    prune: bool = typer.Option(False, "--prune", help="Then drop the old keys from the key file (nothing needs them)."),
) -> None:
    """A new active secret key; every stored secret resealed under it. A running server
    picks the new keyring up by itself (no restart); old keys stay unless --prune."""
    from suanli.api.server import default_data_dir
    from suanli.control.rekey import rotate
    from suanli.control.secrets import SecretKeyError
    from suanli.db.session import Database, default_sqlite_url

    where = Path(data_dir or default_data_dir()).expanduser().resolve()
    if not where.is_dir():
        raise typer.BadParameter(f"{where} is not a data directory", param_hint="--data-dir")
    database = Database(_db_url(db, db_file) or default_sqlite_url(where))
    try:
        done = rotate(database, where, secret_key_file, prune)
    except SecretKeyError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(1) from None
    finally:
        database.dispose()
    typer.echo(f"key file {done.key_file}: active key {done.new} (was {done.old}); {done.resealed} secret(s) resealed")
    if done.dropped:
        typer.echo(f"dropped old key(s): {', '.join(done.dropped)}")

"""Wire a server together: data dir, database (migrated), bootstrap, backends,
control loop, app — and run it as processes (``serve``: a supervisor, ``api.supervisor``,
over the parts of ``api.parts``).

``build`` is separate from ``serve`` so tests get the same wiring in-process, and each
part builds its share with it.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

from suanli.api.context import ServerContext
from suanli.api.parts import KEEP_ALIVE_S
from suanli.api.tls import Tls, plain_warning
from suanli.backends.base import Backend
from suanli.backends.local import LocalBackend, discover_gpus
from suanli.backends.slurm import SlurmBackend, SlurmClient
from suanli.billing import price_versions
from suanli.billing import store as billing_store
from suanli.control import alerts, auth, heartbeat, images, nodes
from suanli.control.autostop import AutostopSettings
from suanli.control.autostop import check as autostop_check
from suanli.control.billing_worker import BillingWorker
from suanli.control.loop import ControlLoop
from suanli.control.metrics import Collector, MetricsSettings
from suanli.control.plane import DEFAULT_NOTICE_S, MigrationSettings, ReclaimSettings
from suanli.control.secrets import Keyring
from suanli.db import urls
from suanli.db.session import Database, default_sqlite_url
from suanli.inventory import Inventory, demo_inventory

if TYPE_CHECKING:
    import uvicorn

log = logging.getLogger(__name__)

#: where the server says what it is doing (the CLI: ``typer.echo``)
Echo = Callable[[str], None]

DEFAULT_PORT = 8470


@dataclass
class Bootstrap:
    admin_token: str | None
    nodes_added: list[str]
    virtual: bool


def default_data_dir() -> Path:
    return Path(os.environ.get("SUANLI_DATA_DIR", ".suanli"))


def slurm_tag_prefix(data_dir: Path) -> str:
    """One Slurm job tag prefix per data directory: stable across restarts (re-adoption by
    tag), distinct between servers sharing a cluster (neither sweeps the other's jobs)."""
    import hashlib

    return "suanli-" + hashlib.blake2b(str(Path(data_dir).resolve()).encode(), digest_size=4).hexdigest()


def private_dir(data_dir: Path) -> Path:
    """The data directory, 0700 whatever the umask: the database, keys, tokens, uploads
    and workloads' files under it are the server's user's alone (a directory from an
    older server is tightened too)."""
    data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(data_dir, 0o700)
    return data_dir


def bootstrap(db: Database, data_dir: Path, inventory: Inventory | None = None) -> Bootstrap:
    """First start on an empty database: an admin and an inventory (this host's
    NVML GPUs if there are any, else the demo inventory of virtual GPUs). The operator's
    own tenant is post-paid (every tenant created later is prepaid). The seed price
    book is written here, before any thread reads prices: written on a first read, two
    concurrent first reads each wrote one (two "version 1"s on PostgreSQL)."""
    with db.transaction() as s:
        price_versions.ensure_book(s)
        alerts.open_cursor(s)  # alerts from this start on, whenever the alerts thread first looks
    token = auth.bootstrap_admin(db, data_dir)
    if token is not None:
        billing_store.set_terms(db, auth.DEFAULT_TENANT, "first start", terms="postpaid")
    added: list[str] = []
    virtual = True
    if not nodes.list_nodes(db):
        found = discover_gpus() if inventory is None else []
        inv = inventory or (nodes.host_inventory(found) if found else demo_inventory())
        virtual = not found
        added = [n.name for n in nodes.register(db, None, inv, discover_gpus)]
    return Bootstrap(token, added, virtual)


def build(
    data_dir: Path,
    db_url: str | None = None,
    *,
    start_loop: bool = True,
    inventory: Inventory | None = None,
    interval_s: float = 0.5,
    stop_grace_s: float = 10.0,
    policy: str = "suanli",
    slurm_conf: Path | None = None,
    notice_s: float = DEFAULT_NOTICE_S,
    migration: MigrationSettings | None = None,
    heartbeat_timeout_s: float | None = heartbeat.DEFAULT_TIMEOUT_S,
    runtime: str | None = None,
    allow_process_runtime: bool | None = None,
    ssh_bind: str = "127.0.0.1",
    ssh_host: str | None = None,
    max_upload_mib: int = 100,
    audit: bool = True,
    audit_retention_days: int = 7 * 365 + 2,
    secret_key_file: Path | None = None,
    tls: bool = False,
    metrics: MetricsSettings | None = None,
    autostop: AutostopSettings | None = None,
    prepare: bool = True,
    background_work: bool = True,
) -> tuple[ServerContext, Bootstrap]:
    """``slurm_conf``: also drive that Slurm cluster (its nodes are registered on the first
    start, when the database has none); ``notice_s``: the spot reclaim notice;
    ``migration``: moving running shares for waiting whole-GPU work (default: off);
    ``heartbeat_timeout_s``: silence after which a node with an agent is down;
    ``runtime``: the local backend's (``auto``: containers where an engine answers, else
    host processes; default ``$SUANLI_RUNTIME``); ``allow_process_runtime``: let every tenant
    run without isolation (default ``$SUANLI_ALLOW_PROCESS_RUNTIME``);
    ``ssh_bind``/``ssh_host``: where instances' sshd ports listen and the host renters use;
    ``secret_key_file``: the operator's key file (default ``$SUANLI_SECRET_KEY_FILE``, else
    ``<data-dir>/secret-key``); ``tls``: the listeners serve HTTPS (HSTS, ``Secure`` cookies);
    ``metrics``: the usage collector's interval and retention (``control.metrics``);
    ``autostop``: idle auto-stop's default window, minimum and thresholds (``control.autostop``);
    ``prepare``: migrate the database, bootstrap and seed images (a ``suanli server`` part
    skips it: the supervisor did it before starting the parts); ``background_work``: make the
    control loop, billing worker and metrics collector (an API process has none: they run in
    the worker process, ``api.supervisor``)."""
    data_dir = private_dir(Path(data_dir).expanduser().resolve())  # tasks run with other working directories
    keyring = Keyring.load(data_dir, secret_key_file)  # before the database: a bad key file changes nothing
    db = Database(db_url or default_sqlite_url(data_dir))
    if prepare:
        db.migrate()
    runtime = runtime or os.environ.get("SUANLI_RUNTIME") or "auto"
    if allow_process_runtime is None:
        allow_process_runtime = os.environ.get("SUANLI_ALLOW_PROCESS_RUNTIME", "") not in ("", "0", "false")
    local = LocalBackend(data_dir / "workloads", runtime, ssh_bind=ssh_bind)
    backends: dict[str, Backend] = {"local": local}
    if slurm_conf is not None:
        slurm = SlurmBackend(
            SlurmClient(slurm_conf=Path(slurm_conf)),
            data_dir / "slurm",
            notice_s=int(notice_s),
            runtime=runtime,
            tag_prefix=slurm_tag_prefix(data_dir),
        )
        backends["slurm"] = slurm
        if prepare and inventory is None and not nodes.list_nodes(db):
            inventory = slurm.discover_inventory()
    boot = Bootstrap(None, [], False)
    if prepare:
        boot = bootstrap(db, data_dir, inventory)
        images.seed_defaults(db, local.containers.engine.image_exists if local.containers else lambda ref: False)
    ctx = ServerContext(
        db=db,
        backends=backends,
        data_dir=data_dir,
        allow_process_runtime=allow_process_runtime,
        ssh_host=ssh_host or ("127.0.0.1" if ssh_bind in ("0.0.0.0", "::") else ssh_bind),
        max_upload_bytes=max_upload_mib << 20,
        audit=audit,
        audit_retention_days=audit_retention_days,
        tls=tls,
        keyring=keyring,
        verify_command=os.environ.get("SUANLI_VERIFY_COMMAND") or None,
    )
    ctx.autostop = autostop or AutostopSettings()
    if not background_work:
        return ctx, boot
    ctx.loop = ControlLoop(
        db,
        backends,
        data_dir,
        policy=policy,
        interval_s=interval_s,
        stop_grace_s=stop_grace_s,
        reclaim=ReclaimSettings(notice_s=notice_s, grace_s=stop_grace_s),
        migration=migration,
        heartbeat_timeout_s=heartbeat_timeout_s,
        keyring=keyring,
    )
    ctx.metrics = Collector(db, backends, metrics)  # started with the server's other threads (api.background)
    plane, stop_rules = ctx.loop.plane, ctx.autostop
    ctx.metrics.after.append(lambda got, now: autostop_check(plane, stop_rules, got, now))
    ctx.billing = BillingWorker(db)  # started with the server's other threads (api.background)
    # work that ended is rated at once: a run rates ended work up to now (its end has committed)
    ctx.loop.work_ended = lambda: ctx.billing.wake()  # type: ignore[union-attr]
    if start_loop:
        ctx.loop.start()
    return ctx, boot


def ensure_default_image(ctx: ServerContext, local: LocalBackend, echo: Echo) -> None:
    """The quick start's promise: after the first start the default image exists. Pulled
    where a registry answers, else built here from Debian's packages (minutes, once)."""
    assert local.containers is not None
    engine = local.containers.engine
    with ctx.db.sessions() as s:
        default = images.resolve(s, None)
    echo(f"runtime: container ({engine.facts.binary}); default image {default.name} = {default.ref}")
    if engine.image_exists(default.ref):
        return
    from suanli.backends.local import imagebuild

    echo(f"image {default.ref} is not here yet: pulling it, or building it from Debian's packages (a few minutes, once)")
    try:
        done = imagebuild.pull_or_build(
            default.name,
            engine.facts.binary,
            progress=lambda line: echo(f"  {line}"),
            ref=default.ref,
            cache_dir=ctx.data_dir / "cache" / "debootstrap",
        )
    except imagebuild.BuildError as exc:
        echo(
            f"WARNING: the default image {default.ref} is not available ({exc}); instances of it fail to start "
            "until an operator builds it (suanli images build) or adds another (suanli images add)"
        )
        return
    echo(f"image {default.ref}: {done.how} in {done.seconds:.0f} s")


def start_proxy(
    ctx: ServerContext, host: str, port: int, echo: Echo, domain: str = "localhost", tls: Tls | None = None
) -> uvicorn.Server:
    """The port proxy on a listener of its own, in a thread: renters' pages get an origin
    that is not the console's, one per published port (``ID-PORT.domain``); with ``tls``,
    HTTPS with the API's certificate. Returns the uvicorn server (set ``should_exit`` to stop it)."""
    import threading

    import uvicorn

    from suanli.api.proxy_app import create_proxy_app

    ctx.proxy_port, ctx.proxy_domain = port, domain
    options = tls.uvicorn_options() if tls else {}
    config = uvicorn.Config(
        create_proxy_app(ctx), host=host, port=port, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S, **options
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="suanli-proxy", daemon=True)
    thread.start()
    while not server.started and thread.is_alive():
        thread.join(0.05)
    if not server.started:
        raise SystemExit(f"the port proxy cannot listen on {host}:{port} (choose another with --proxy-port)")
    echo(
        f"port proxy: {'https' if tls else 'http'}://ID-PORT.{domain}:{port}/ (instances' published ports, one origin each"
        + (
            "; browsers on this machine only: renters elsewhere need --proxy-domain with wildcard DNS)"
            if domain == "localhost"
            else f"; *.{domain} must resolve to this server)"
        )
    )
    return server


def default_workers() -> int:
    """One API worker per core this process may run on (one on a single core)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    return max(1, cores)


def serve(
    host: str,
    port: int,
    data_dir: Path,
    db_url: str | None,
    echo: Echo = print,
    *,
    slurm_conf: Path | None = None,
    notice_s: float = DEFAULT_NOTICE_S,
    heartbeat_timeout_s: float | None = heartbeat.DEFAULT_TIMEOUT_S,
    proxy_port: int | None = None,
    proxy_domain: str = "localhost",
    tls: Tls | None = None,
    workers: int | None = None,
    **options,
) -> None:
    """Prepare the server (database migrated, bootstrap, default image), then run its
    parts as processes under a supervisor (``api.supervisor``, ``api.parts``): the
    worker (control loop, billing, metrics, alerts, audit retention), the API under
    uvicorn with ``workers`` processes [default: one per core], and the port proxy.
    ``proxy_port``: where instances' published ports are served [default: ``port`` + 1],
    each at ``ID-PORT.proxy_domain``; ``tls``: both listeners serve HTTPS with it;
    ``options``: the rest of ``build``'s (runtime, ssh, upload size, key file)."""
    from suanli.api import parts, supervisor

    os.umask(0o077)  # every file and directory the server (and its workloads) makes is its user's alone
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    workers = workers or default_workers()
    if workers < 1:
        raise ValueError("workers must be at least 1")
    ctx, boot = build(
        data_dir,
        db_url,
        slurm_conf=slurm_conf,
        notice_s=notice_s,
        heartbeat_timeout_s=heartbeat_timeout_s,
        start_loop=False,
        background_work=False,
        tls=tls is not None,
        **options,
    )
    local = ctx.backends["local"]
    assert isinstance(local, LocalBackend)
    if local.containers is not None:
        ensure_default_image(ctx, local, echo)
    else:
        echo(
            f"runtime: {local.runtime_label}: workloads run on this host's processes; "
            + (
                "every tenant may use it (--allow-process-runtime)"
                if ctx.allow_process_runtime
                else "only the operator's tenant may use it"
            )
        )
    url = f"{'https' if tls else 'http'}://{host}:{port}"
    echo(f"suanli server: {url}  (web console {url}/, API docs {url}/docs, data {ctx.data_dir}, db {urls.masked(ctx.db.url)})")
    echo(f"secrets: sealed with AES-256-GCM, key file {ctx.keyring.path} (key {ctx.keyring.active_id})")
    if tls is None and (warning := plain_warning(host)):
        echo(warning)
    if boot.nodes_added:
        kind = (
            "Slurm nodes from sinfo"
            if slurm_conf is not None
            else "virtual GPUs from the demo inventory"
            if boot.virtual
            else "GPUs found by NVML"
        )
        echo(f"registered nodes: {', '.join(boot.nodes_added)} ({kind})")
    if boot.admin_token:
        echo(f"admin token: {boot.admin_token}")
        echo(f"(also written to {(data_dir / 'admin-token').resolve()}; it is not shown again)")
    else:
        echo(f"admin token: see {(data_dir / 'admin-token').resolve()} (created on first start)")
    echo(f"next: suanli login --url {url} --token $(cat {data_dir / 'admin-token'})")
    if not ctx.audit:
        echo("WARNING: auditing is OFF (--no-audit): state changes are not recorded in the audit log")
    proxy_port = proxy_port if proxy_port is not None else port + 1
    echo(
        f"port proxy: {'https' if tls else 'http'}://ID-PORT.{proxy_domain}:{proxy_port}/ (instances' published ports, one origin each"
        + (
            "; browsers on this machine only: renters elsewhere need --proxy-domain with wildcard DNS)"
            if proxy_domain == "localhost"
            else f"; *.{proxy_domain} must resolve to this server)"
        )
    )
    api_socks = parts.listen(host, port, "API", workers)
    [proxy_sock] = parts.listen(host, proxy_port, "port proxy (choose another port with --proxy-port)")
    echo(f"processes: a worker (control loop, billing, metrics, alerts), {workers} API worker(s), the port proxy")
    ctx.db.dispose()  # the parts open their own; nothing of the supervisor's crosses the fork
    if workers > 1:  # every API worker's request metrics in one scrape (``api.metrics``)
        metrics_dir = ctx.data_dir / "prometheus"
        shutil.rmtree(metrics_dir, ignore_errors=True)
        metrics_dir.mkdir(mode=0o700)
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = str(metrics_dir)
        if "prometheus_client.values" in sys.modules:  # imported before the variable was set
            from prometheus_client import values

            values.ValueClass = values.get_value_class()
    import suanli.api.app  # noqa: F401  imported once here, shared by every forked part
    import suanli.api.proxy_app  # noqa: F401

    config = parts.PartConfig(
        build,
        ctx.data_dir,
        db_url,
        proxy_port,
        proxy_domain,
        tls,
        {"slurm_conf": slurm_conf, "notice_s": notice_s, "heartbeat_timeout_s": heartbeat_timeout_s, **options},
    )
    status = supervisor.Supervisor(
        [
            supervisor.Part("worker", partial(parts.run_worker, config)),
            # a restarted API worker gets its predecessor's socket: connections that came
            # meanwhile wait in its queue
            *(
                supervisor.Part(f"api-{n + 1}", partial(parts.run_api, config, api_socks[n % len(api_socks)]))
                for n in range(workers)
            ),
            supervisor.Part("proxy", partial(parts.run_proxy, config, proxy_sock)),
        ],
        echo,
    ).run()
    if status:
        raise SystemExit(status)

"""The processes ``suanli server`` runs (``api.supervisor`` starts and restarts them):

- **worker**: every background thread of ``api.background`` (control loop, billing,
  metrics and idle auto-stop, alerts, audit retention) and the listener of the API's
  wakes (``control.wakeup``); it owns every side effect on workloads.
- **api**: the HTTP API under uvicorn with ``workers`` processes; it only serves
  requests, and reaches the worker through the database and wake datagrams.
- **proxy**: the port proxy (``api.proxy_app``), renters' published ports. It gets a
  process of its own rather than a place in either: its connections are renters' own
  traffic, long-lived (WebSockets, downloads) and unbounded in volume, so in the worker
  they would take the GIL from the control loop and in the API from the health check;
  and uvicorn's workers share one listening socket, for one app, so the API's workers
  cannot also serve a second port.

Each is ``python -m suanli.api.parts NAME`` with the server's settings in the
environment (``PART_ENV``, JSON: the database URL may carry a password, which must not
be in argv). A part dies with the supervisor (``PR_SET_PDEATHSIG``): a supervisor killed
with ``kill -9`` takes its parts down as the single process it replaced would have gone.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import shutil
import signal
import sys
import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

#: the environment variable carrying a part's ``PartConfig`` (JSON)
PART_ENV = "SUANLI_PART_CONFIG"
PARTS = ("worker", "api", "proxy")

log = logging.getLogger(__name__)


@dataclass
class PartConfig:
    """What every part needs to build its share of the server (``api.server.build``)."""

    host: str
    port: int
    proxy_port: int
    proxy_domain: str
    data_dir: str
    db_url: str | None
    workers: int
    tls_cert: str | None = None
    tls_key: str | None = None
    #: ``build``'s keyword options, JSON-shaped (paths as strings, settings as dicts)
    options: dict[str, Any] = field(default_factory=dict)

    def to_env(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_env(cls) -> PartConfig:
        raw = os.environ.get(PART_ENV)
        if not raw:
            raise SystemExit(f"{PART_ENV} is not set: parts are started by `suanli server`")
        return cls(**json.loads(raw))

    def build_options(self) -> dict[str, Any]:
        """``options`` back as ``build`` takes them."""
        from suanli.control.autostop import AutostopSettings
        from suanli.control.metrics import MetricsSettings

        opts = dict(self.options)
        for name in ("slurm_conf", "secret_key_file"):
            if opts.get(name) is not None:
                opts[name] = Path(opts[name])
        if opts.get("metrics") is not None:
            opts["metrics"] = MetricsSettings(**opts["metrics"])
        if opts.get("autostop") is not None:
            opts["autostop"] = AutostopSettings(**opts["autostop"])
        return opts

    def tls(self):  # type: ignore[no-untyped-def]
        from suanli.api.tls import Tls

        return Tls.of(Path(self.tls_cert), Path(self.tls_key)) if self.tls_cert and self.tls_key else None


def options_json(options: dict[str, Any]) -> dict[str, Any]:
    """``build``'s keyword options as JSON: paths as strings, settings dataclasses as dicts."""
    out: dict[str, Any] = {}
    for name, value in options.items():
        if isinstance(value, Path):
            value = str(value)
        elif hasattr(value, "__dataclass_fields__"):
            value = asdict(value)
        out[name] = value
    return out


def die_with_parent() -> None:
    """SIGKILL this process when the process that started it dies (Linux; a no-op
    elsewhere), and exit now if it already has."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return
    expected = os.environ.get("SUANLI_SUPERVISOR_PID")
    if expected and os.getppid() != int(expected) and not os.environ.get("SUANLI_PART_UVICORN_CHILD"):
        os._exit(1)


def ready() -> None:
    """Tell the supervisor this part is up (``api.supervisor``): once, on the fd it gave."""
    fd = os.environ.pop("SUANLI_READY_FD", None)
    if fd is None:
        return
    try:
        os.write(int(fd), b"1")
        os.close(int(fd))
    except OSError:
        pass


def _serve(config) -> None:  # type: ignore[no-untyped-def]
    """``uvicorn.run``'s own steps, with ``ready`` once the port is bound (a port in use
    exits here, before it): one process, or ``config.workers`` sharing the socket."""
    from uvicorn import Server
    from uvicorn.supervisors import Multiprocess

    sock = config.bind_socket()
    ready()
    if config.workers > 1:
        Multiprocess(config, sockets=[sock]).run()
    else:
        Server(config).run(sockets=[sock])


def _context(cfg: PartConfig, background_work: bool):  # type: ignore[no-untyped-def]
    from suanli.api.server import build

    ctx, _ = build(
        Path(cfg.data_dir),
        cfg.db_url,
        start_loop=False,
        prepare=False,
        background_work=background_work,
        tls=cfg.tls_cert is not None,
        **cfg.build_options(),
    )
    ctx.proxy_port, ctx.proxy_domain = cfg.proxy_port, cfg.proxy_domain
    return ctx


def run_worker(cfg: PartConfig) -> None:
    """The worker: the background threads until SIGTERM or SIGINT, then stopped in reverse
    (the loop lets its in-flight launches end first, as a single-process server did)."""
    from suanli.api.background import background, start_all, stop_all

    ctx = _context(cfg, background_work=True)
    halt = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: halt.set())
    threads = background(ctx, wakes=True)
    start_all(threads)
    ready()
    log.info("worker: %s running", ", ".join(t.name for t in threads))
    try:
        while not halt.wait(1.0):
            pass
    finally:
        stop_all(threads)
        ctx.db.dispose()


def api_app():  # type: ignore[no-untyped-def]
    """The API's ASGI app in one uvicorn worker process (uvicorn's factory)."""
    from suanli.api.app import create_app
    from suanli.control import wakeup

    die_with_parent()
    cfg = PartConfig.from_env()
    ctx = _context(cfg, background_work=False)
    ctx.waker = wakeup.Sender(wakeup.socket_path(ctx.data_dir))
    return create_app(ctx)


def run_api(cfg: PartConfig) -> None:
    import uvicorn

    tls = cfg.tls()
    if cfg.workers > 1:  # every worker's request metrics in one scrape (``api.metrics``)
        shutil.rmtree(os.environ["PROMETHEUS_MULTIPROC_DIR"], ignore_errors=True)
        Path(os.environ["PROMETHEUS_MULTIPROC_DIR"]).mkdir(mode=0o700, parents=True)
        os.environ["SUANLI_PART_UVICORN_CHILD"] = "1"  # uvicorn's workers' parent is this process
    _serve(
        uvicorn.Config(
            "suanli.api.parts:api_app",
            factory=True,
            host=cfg.host,
            port=cfg.port,
            workers=cfg.workers,
            log_level="warning",
            **(tls.uvicorn_options() if tls else {}),
        )
    )


def run_proxy(cfg: PartConfig) -> None:
    import uvicorn

    from suanli.api.proxy_app import create_proxy_app

    tls = cfg.tls()
    ctx = _context(cfg, background_work=False)
    app = create_proxy_app(ctx)
    _serve(uvicorn.Config(app, host=cfg.host, port=cfg.proxy_port, log_level="warning", **(tls.uvicorn_options() if tls else {})))


def main() -> None:
    if len(sys.argv) != 2 or sys.argv[1] not in PARTS:
        raise SystemExit(f"usage: python -m suanli.api.parts {{{','.join(PARTS)}}}")
    name = sys.argv[1]
    die_with_parent()
    os.umask(0o077)
    logging.basicConfig(level=logging.INFO, format=f"%(asctime)s %(levelname)s {name} %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    cfg = PartConfig.from_env()
    {"worker": run_worker, "api": run_api, "proxy": run_proxy}[name](cfg)


if __name__ == "__main__":
    main()

"""The processes ``suanli server`` runs, each forked by the supervisor (``api.supervisor``),
which restarts one that dies:

- **worker**: every background thread of ``api.background`` (control loop, billing,
  metrics and idle auto-stop, alerts, audit retention) and the listener of the API's
  wakes (``control.wakeup``); it owns every side effect on workloads.
- **api-1** .. **api-N**: the HTTP API, one uvicorn server per process, each on a listening
  socket of its own on the API's port that the supervisor bound (``SO_REUSEPORT``: the
  kernel spreads connections among them, ``listen``); they only serve requests, and reach
  the worker through the database and wake datagrams.
- **proxy**: the port proxy (``api.proxy_app``), renters' published ports. It gets a
  process of its own rather than a place in either: its connections are renters' own
  traffic, long-lived (WebSockets, downloads) and unbounded in volume, so in the worker
  they would take the GIL from the control loop and in the API from the health check;
  and a process apart is restarted apart.

Each part builds its own share of the server with ``api.server.build`` (no migration,
no bootstrap: the supervisor did both before forking).
"""

from __future__ import annotations

import gc
import logging
import signal
import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from suanli.api.context import ServerContext

log = logging.getLogger(__name__)

Ready = Callable[[], None]


@dataclass
class PartConfig:
    """What every part needs to build its share of the server."""

    #: ``api.server.build`` (passed down: the server module starts the parts)
    build: Callable[..., tuple[Any, Any]]
    data_dir: Path
    db_url: str | None
    proxy_port: int
    proxy_domain: str
    tls: Any = None  #: ``api.tls.Tls`` or None
    #: ``build``'s keyword options (runtime, ssh, upload size, key file, settings)
    options: dict[str, Any] = field(default_factory=dict)


def _context(cfg: PartConfig, background_work: bool) -> ServerContext:
    ctx, _ = cfg.build(
        cfg.data_dir,
        cfg.db_url,
        start_loop=False,
        prepare=False,
        background_work=background_work,
        tls=cfg.tls is not None,
        **cfg.options,
    )
    ctx.proxy_port, ctx.proxy_domain = cfg.proxy_port, cfg.proxy_domain
    return ctx


def run_worker(cfg: PartConfig, ready: Ready) -> None:
    """The worker: the background threads until SIGTERM or SIGINT, then stopped in reverse
    (the loop lets its in-flight launches end first, as a single-process server did)."""
    from suanli.api.background import background, start_all, stop_all

    halt = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: halt.set())
    ctx = _context(cfg, background_work=True)
    threads = background(ctx, wakes=True)
    settle_heap()
    start_all(threads)
    log.info("worker: %s running", ", ".join(t.name for t in threads))
    ready()
    try:
        while not halt.wait(1.0):
            pass
    finally:
        stop_all(threads)
        ctx.db.dispose()


#: seconds an idle keep-alive connection stays open
KEEP_ALIVE_S = 75


def settle_heap() -> None:
    """Move what a part built before serving (its imports, its app) out of the garbage
    collector's sight. Why: under 50 clients an API worker's full collection ran every
    1-2 s and took 100-200 ms, finding nothing, and every request in flight waited it
    out (most of a listing's tail); with the start-up heap frozen it takes 10-30 ms."""
    gc.collect()
    gc.freeze()


def _serve(app: Any, sock: socket.socket, cfg: PartConfig, ready: Ready) -> None:
    import uvicorn

    # keep-alive longer than the idle timeouts of the proxies and clients in front of it
    # (60 s is common): uvicorn's 5 s closed connections a busy client was about to reuse,
    # and the request it had just written met the close (a ReadError, a proxy's 502)
    config = uvicorn.Config(
        app, log_level="warning", timeout_keep_alive=KEEP_ALIVE_S, **(cfg.tls.uvicorn_options() if cfg.tls else {})
    )
    settle_heap()
    ready()
    uvicorn.Server(config).run(sockets=[sock])


def run_api(cfg: PartConfig, sock: socket.socket, ready: Ready) -> None:
    """One API worker: the app on its socket; wakes go to the worker by datagram."""
    from suanli.api.app import create_app
    from suanli.control import wakeup

    ctx = _context(cfg, background_work=False)
    ctx.waker = wakeup.Sender(wakeup.socket_path(ctx.data_dir))
    _serve(create_app(ctx), sock, cfg, ready)


def run_proxy(cfg: PartConfig, sock: socket.socket, ready: Ready) -> None:
    from suanli.api.proxy_app import create_proxy_app

    _serve(create_proxy_app(_context(cfg, background_work=False)), sock, cfg, ready)


def listen(host: str, port: int, what: str, count: int = 1) -> list[socket.socket]:
    """``count`` listening sockets on one port, bound before any part starts: a port in
    use is said at once, by the supervisor.

    Several (one per API worker) are bound with ``SO_REUSEPORT``, and the kernel spreads
    new connections across them by address. One socket shared by the workers is not
    spread: an asyncio server accepts every connection waiting when it wakes, so the
    worker that woke first took a whole burst and kept it for as long as the clients kept
    their connections alive (under 50 clients, one of two API workers served every
    request and the other none). A plain bind comes first, so a port that another
    server's sockets hold, with ``SO_REUSEPORT`` or without, is refused rather than
    shared."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    shared = count > 1 and hasattr(socket, "SO_REUSEPORT")
    socks: list[socket.socket] = []
    try:
        if shared:  # the plain bind: refused where any socket holds the port
            with _tcp(family) as probe:
                probe.bind((host, port))
                port = probe.getsockname()[1]  # port 0: the one the kernel chose, for all
        for _ in range(count if shared else 1):
            sock = _tcp(family)
            socks.append(sock)
            if shared:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            sock.bind((host, port))
            sock.listen(2048)
            sock.set_inheritable(True)
    except OSError as exc:
        for sock in socks:
            sock.close()
        raise SystemExit(f"the {what} cannot listen on {host}:{port}: {exc.strerror}") from None
    return socks


def _tcp(family: socket.AddressFamily) -> socket.socket:
    # IPPROTO_TCP named, not left 0: asyncio turns Nagle off (TCP_NODELAY) only on accepted
    # sockets whose protocol says TCP. With Nagle on, a response written in two parts
    # (headers, then body) waited for the client's delayed ACK: 40 ms added to most answers.
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    return sock

"""Test factories for the control-plane suite (imported by conftest and tests)."""

from __future__ import annotations

import json as _json
import os as _os
import socket as _socket
import subprocess as _subprocess
import sys as _sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import httpx as _httpx
from fastapi.testclient import TestClient

from suanli.api.app import create_app
from suanli.api.context import ServerContext
from suanli.api.server import build
from suanli.client import SuanliClient
from tests.event_helpers import events_text


@dataclass
class Server:
    ctx: ServerContext
    http: TestClient
    token: str
    data_dir: Path

    @property
    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"}

    def client(self, token: str | None = None) -> SuanliClient:
        return SuanliClient("http://testserver", token or self.token, http=self.http)

    def get(self, path: str, **kw: Any) -> Any:
        r = self.http.get(path, headers=self.headers, **kw)
        assert r.status_code == 200, r.text
        return r.json()

    def post(self, path: str, body: Any = None, expect: int | None = None, token: str | None = None) -> Any:
        r = self.http.post(path, json=body, headers={"Authorization": f"Bearer {token or self.token}"})
        if expect is not None:
            assert r.status_code == expect, r.text
        return r

    def close(self) -> None:
        if self.ctx.loop is not None:
            self.ctx.loop.stop()
        for backend in self.ctx.backends.values():
            for h in backend.list_running():
                backend.stop(h, grace_s=1)
        release_host(self.ctx.backends, self.data_dir)
        self.http.__exit__(None, None, None)
        self.ctx.db.dispose()


def release_host(backends: dict, data_dir: Path) -> None:
    """What a test server leaves on the host beyond its directory: its containers'
    networks and the loop-mounted instance disks."""
    local = backends.get("local")
    containers = getattr(local, "containers", None)
    if containers is not None:
        for name in containers.engine.ps(containers.label):
            containers.engine.remove(name)
        containers.remove_networks()
    from suanli.backends.local import volumes

    root = str(Path(data_dir).resolve())
    with open("/proc/self/mounts") as f:
        for line in f:
            where = line.split()[1]
            if where.startswith(root + "/"):
                volumes.unmount(Path(where))


def release_data_dir(data_dir: Path) -> None:
    """What a server process of ``data_dir`` left on the host: its workloads' host
    processes, containers, networks and mounts."""
    from suanli.backends.local import LocalBackend
    from suanli.backends.local.engine import detect

    workloads = Path(data_dir) / "workloads"
    if not workloads.is_dir():
        return
    engine = detect("podman")
    local = LocalBackend(workloads, "container" if engine is not None else "process", engine)
    for h in local.processes.list_running():
        local.processes.stop(h, grace_s=1)
    release_host({"local": local}, data_dir)


def start_server(data_dir: Path, db_url: str, **kw: Any) -> Server:
    # a quarter of a second between passes (the API wakes the loop for new work): a loop
    # and the polls of the test that waits on it are most of the CPU a waiting test takes
    kw.setdefault("interval_s", 0.25)
    kw.setdefault("stop_grace_s", 2.0)
    ctx, boot = build(data_dir, db_url, **kw)
    assert boot.admin_token
    http = TestClient(create_app(ctx))
    # entered: its requests share one event loop on one thread; a client not entered
    # starts a thread with a new event loop for each request and each response body
    http.__enter__()
    return Server(ctx, http, boot.admin_token, data_dir)


def pauses(first: float, most: float) -> Iterator[float]:
    """Waits between polls: ``first``, then each half as long again, up to ``most``. A
    quick change is seen quickly, and a long wait does not spend a core polling (a job's
    GET, or a loop pass, costs milliseconds of CPU)."""
    pause = min(first, most)
    while True:
        yield pause
        pause = min(most, pause * 1.5)


def wait_until(predicate: Callable[[], Any], timeout_s: float = 20.0, every_s: float = 0.25) -> Any:
    """``predicate()`` once truthy: asked at once, then after ``pauses(0.05, every_s)``."""
    deadline = time.monotonic() + timeout_s
    for pause in pauses(0.05, every_s):
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {predicate}")
        time.sleep(pause)
    raise AssertionError("unreachable")


def wait_state(srv: Server, kind: str, obj_id: int, states: tuple[str, ...], timeout_s: float = 20.0) -> dict:
    """The object once its state is one of ``states``; on timeout the error shows its
    state and its events as text."""
    path = f"/v1/{kind}s/{obj_id}"
    try:
        return wait_until(lambda: (o := srv.get(path))["state"] in states and o, timeout_s)
    except AssertionError:
        events = srv.get("/v1/events", params={"kind": kind, "object_id": obj_id})
        state = srv.get(path)["state"]
        raise AssertionError(
            f"{kind} {obj_id} is {state!r} after {timeout_s}s, not one of {states}; its events:\n{events_text(events)}"
        ) from None


# -- real server processes ---------------------------------------------------------------


def free_port() -> int:
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


T = TypeVar("T")

#: How many times a test's server is started on fresh ports when one was taken meanwhile.
PORT_TRIES = 3


class PortTaken(AssertionError):
    """The server stopped at once: a port ``free_port`` named was bound by another socket of
    the test run (a server, a workload, a client's ephemeral port) before the server bound it."""


def port_taken(log: str) -> bool:
    """Whether a server's ``log`` ends with the supervisor's word that a listener's port was in use."""
    return "cannot listen on" in log and "in use" in log


def on_fresh_ports(start: Callable[[], T], renew: Callable[[], object], tries: int = PORT_TRIES) -> T:
    """``start()``; when the server found a port taken, ``renew()`` its ports and start again,
    ``tries`` starts in all."""
    for _ in range(tries - 1):
        try:
            return start()
        except PortTaken:
            renew()
    return start()


@contextmanager
def closed_port() -> Iterator[int]:
    """A loopback port where nothing listens, for as long as the block runs: it is bound
    (without ``listen``), so no server of another test can take it meanwhile, as one once
    took a port ``free_port`` had named (``test_proxy`` then read a 200 where it expected
    "nothing listens")."""
    with _socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        yield int(s.getsockname()[1])


class _Served:
    """What a test reads off any running server: its URL and the admin token it wrote."""

    port: int
    data_dir: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def token(self) -> str:
        return (self.data_dir / "admin-token").read_text().strip()


@dataclass
class ServerProcess(_Served):
    """``suanli server`` as a real process on a free loopback port."""

    data_dir: Path
    db_url: str | None  #: None: the default, SQLite in the data dir
    port: int
    proc: _subprocess.Popen | None = None
    #: None: pass --data-dir; else run in this directory with the default ./.suanli
    cwd: Path | None = None
    #: extra ``suanli server`` options
    args: tuple[str, ...] = ()
    #: the port proxy's listener
    proxy_port: int = 0
    #: how many starts on fresh ports when the server finds one of its ports taken
    port_tries: int = PORT_TRIES

    def start(self) -> ServerProcess:
        from tests.sqlite_helpers import migrated_sqlite_url

        self.data_dir.mkdir(parents=True, exist_ok=True)
        database = self.data_dir / "suanli.db"
        if self.db_url is None and self.cwd is None and not database.exists():
            # the schema from the process's migrated template, as the in-process servers
            # have it: the server process then finds its database at the head and skips
            # Alembic (over a second of CPU); the quick-start tests (``cwd``) migrate
            migrated_sqlite_url(database)
        self.proxy_port = self.proxy_port or free_port()
        return on_fresh_ports(self._start_once, self._fresh_ports, self.port_tries)

    def _fresh_ports(self) -> None:
        self.port, self.proxy_port = free_port(), free_port()

    def _start_once(self) -> ServerProcess:
        log = open(self.data_dir / "server.log", "ab")
        db = ["--db", self.db_url] if self.db_url else []
        where = [] if self.cwd else ["--data-dir", str(self.data_dir)]
        env = {k: v for k, v in _os.environ.items() if k != "SUANLI_DATA_DIR"}
        self.proc = _subprocess.Popen(
            cli_command("server", "--port", str(self.port), "--proxy-port", str(self.proxy_port), *where, *db, *self.args),
            stdout=log,
            stderr=_subprocess.STDOUT,
            stdin=_subprocess.DEVNULL,
            cwd=self.cwd,
            env=env,
        )
        try:
            wait_until(self._healthy, 60, 0.2)
        except PortTaken:
            self.stop()
            raise
        except BaseException as exc:
            self.stop()  # a server slow to start must not outlive the test (nor its parts, api.supervisor)
            raise AssertionError(f"{exc}; the server's log:\n{(self.data_dir / 'server.log').read_text()[-3000:]}") from exc
        return self

    def _healthy(self) -> bool:
        assert self.proc is not None
        if self.proc.poll() is not None:
            log = (self.data_dir / "server.log").read_text()[-3000:]
            raise PortTaken(log) if port_taken(log) else AssertionError(f"server exited: {log}")
        try:
            return _httpx.get(self.url + "/healthz", timeout=2).status_code == 200
        except _httpx.TransportError:
            return False

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(10)

    def stop(self) -> None:
        """Stop the server as an operator would; its workloads keep running (a restart adopts them)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except _subprocess.TimeoutExpired:
                self.proc.kill()

    def close(self) -> None:
        """The end of a test: stop the server, then what its workloads left on the host
        (processes, containers, networks, mounts); left running, they outlived the test run."""
        self.stop()
        release_data_dir(self.data_dir)

    def client(self) -> SuanliClient:
        return SuanliClient(self.url, self.token)

    def cli_env(self) -> dict[str, str]:
        """The environment of a CLI logged in to this server."""
        return dict(_os.environ, SUANLI_URL=self.url, SUANLI_TOKEN=self.token, SUANLI_CONFIG=str(self.data_dir / "cli.json"))

    def cli(self, *args: str, check: bool = True) -> _subprocess.CompletedProcess:
        done = _subprocess.run(cli_command(*args), env=self.cli_env(), capture_output=True, text=True, timeout=120)
        if check:
            assert done.returncode == 0, (args, done.stdout, done.stderr)
        return done

    def cli_json(self, *args: str) -> Any:
        return _json.loads(self.cli(*args).stdout)


@dataclass
class LiveServer(_Served):
    """The server ``suanli server`` wires (``api.server.build``, its app, the threads of
    ``api.background``: control loop, billing, the port proxy on its own listener), on
    real loopback ports, but in this test process: for tests that need a real HTTP server
    (a browser, the CLI, a WebSocket) and are not about the process. Starting one costs
    about a tenth of a second; a ``suanli server`` process costs seconds of imports and
    migrations, more on a loaded machine. Same attributes as ``ServerProcess``; ``close``
    also stops its workloads and gives back what they held on the host."""

    data_dir: Path
    db_url: str | None = None  #: None: SQLite in the data dir, migrated from a copy
    #: ``build``'s options (runtime, allow_process_runtime, heartbeat_timeout_s, ...)
    options: dict[str, Any] | None = None
    port: int = 0
    proxy_port: int = 0
    ctx: ServerContext | None = None
    _threads: list[Any] | None = None
    _http: Any = None
    _thread: Any = None

    def start(self) -> LiveServer:
        import threading

        import uvicorn

        from suanli.api.background import background, start_all
        from suanli.api.server import start_proxy
        from tests.sqlite_helpers import migrated_sqlite_url

        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.db_url is None:
            self.db_url = migrated_sqlite_url(self.data_dir / "suanli.db")
        opts = {"interval_s": 0.25, "stop_grace_s": 2.0, **(self.options or {})}  # as start_server's
        self.ctx, boot = build(self.data_dir, self.db_url, start_loop=False, **opts)
        self.proxy_port = self.proxy_port or free_port()
        ctx = self.ctx
        self._threads = background(ctx, lambda: start_proxy(ctx, "127.0.0.1", self.proxy_port, lambda line: None))
        start_all(self._threads)
        self._http = uvicorn.Server(uvicorn.Config(create_app(ctx), host="127.0.0.1", port=self.port, log_level="warning"))
        self._thread = threading.Thread(target=self._http.run, name="suanli-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._http.started:
            assert self._thread.is_alive() and time.monotonic() < deadline, "the API did not start listening"
            time.sleep(0.01)
        self.port = self._http.servers[0].sockets[0].getsockname()[1]
        return self

    def close(self) -> None:
        from suanli.api.background import stop_all

        if self._http is not None:
            self._http.should_exit = True
            self._thread.join(10)
        if self._threads is not None:
            stop_all(self._threads)
        if self.ctx is not None:
            for backend in self.ctx.backends.values():
                for h in backend.list_running():
                    backend.stop(h, grace_s=1)
            release_host(self.ctx.backends, self.data_dir)
            self.ctx.db.dispose()

    def client(self) -> SuanliClient:
        return SuanliClient(self.url, self.token)

    def cli_env(self) -> dict[str, str]:
        """The environment of a CLI logged in to this server."""
        return dict(_os.environ, SUANLI_URL=self.url, SUANLI_TOKEN=self.token, SUANLI_CONFIG=str(self.data_dir / "cli.json"))


def cli_command(*args: str) -> list[str]:
    """The installed ``suanli`` entry point of this virtual environment."""
    return [str(Path(_sys.executable).parent / "suanli"), *args]

"""One small adapter over an OCI container engine's command line: Podman or Docker Engine.

Both speak the same CLI for what Suanli needs (run, ps, inspect, kill, stop, rm, exec,
network create, image exists), so one class drives either; the differences are in
``EngineFacts`` (the OCI runtime to force, the rlimits to lower). The CLI, not a REST
socket, because it needs no daemon for Podman and is the interface both engines promise
to keep stable.

Facts of the machines this was built on (``../shared/containers/NOTES.md``): ``crun``
fails on cgroup v1 hybrid hosts, so Podman runs with ``--runtime runc``; root may lack
``CAP_SYS_RESOURCE``, so ``nofile``/``nproc`` are lowered explicitly.
"""

from __future__ import annotations

import fcntl
import ipaddress
import json
import os
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from suanli.backends.base import BackendError


@dataclass(frozen=True)
class EngineFacts:
    binary: str  #: ``podman`` or ``docker``
    oci_runtime: str | None = "runc"  #: passed as ``--runtime``; None: the engine's default
    ulimits: tuple[str, ...] = ("nofile=1024:1024", "nproc=4096:4096")


@dataclass(frozen=True)
class Container:
    """One row of ``ps -a``: what the runtime needs to judge a task."""

    name: str
    state: str  #: running, exited, created, stopping, ...
    exit_code: int | None
    labels: dict[str, str] = field(default_factory=dict)
    pid: int = 0  #: the container's init on this host (0: not running, or not said)

    @property
    def running(self) -> bool:
        return self.state in ("running", "stopping", "paused")


class Engine:
    """The engine's CLI. Calls are synchronous; ``ps`` is cached for a fraction of a
    second so a reconcile pass over many containers costs one ``ps``, not one per task."""

    PS_TTL_S = 0.3

    def __init__(self, facts: EngineFacts) -> None:
        self.facts = facts
        self._ps_lock = threading.Lock()
        self._ps: tuple[float, str, dict[str, Container]] | None = None
        self._generation = 0  #: bumped by every change, so a listing taken before one is not kept

    # -- plumbing ------------------------------------------------------------------------
    def cli(
        self,
        *args: str,
        timeout_s: float = 60.0,
        check: bool = True,
        input: bytes | None = None,
        env: dict[str, str] | None = None,
    ) -> subprocess.CompletedProcess[bytes]:
        """``env``: variables added to the engine client's own environment (secrets that
        ``run -e NAME`` takes from there, so their values are never in an argv)."""
        try:
            done = subprocess.run(
                [self.facts.binary, *args],
                capture_output=True,
                timeout=timeout_s,
                input=input,
                stdin=None if input is not None else subprocess.DEVNULL,
                env={**os.environ, **env} if env else None,
            )
        except subprocess.TimeoutExpired as exc:
            raise BackendError(f"{self.facts.binary} {args[0]} timed out after {timeout_s}s") from exc
        except OSError as exc:
            raise BackendError(f"cannot run {self.facts.binary}: {exc}") from exc
        if check and done.returncode != 0:
            err = (done.stderr or done.stdout).decode(errors="replace").strip()
            raise BackendError(f"{self.facts.binary} {args[0]} failed: {err}")
        return done

    def invalidate(self) -> None:
        with self._ps_lock:
            self._ps = None
            self._generation += 1

    # -- containers ------------------------------------------------------------------------
    def run_args(self) -> list[str]:
        """Options every container gets from the engine facts."""
        args = ["--runtime", self.facts.oci_runtime] if self.facts.oci_runtime else []
        for u in self.facts.ulimits:
            args += ["--ulimit", u]
        return args

    def run(self, args: list[str], secrets: dict[str, str] | None = None) -> str:
        """``run -d``; returns the container id. ``secrets`` go into the container's
        environment through ``-e NAME`` and the client's environment: never in argv (which
        every user of the host may read in ``ps``), never in a file."""
        named = [a for k in sorted(secrets or {}) for a in ("-e", k)]
        try:
            return self.cli("run", "-d", *self.run_args(), *named, *args, timeout_s=120, env=secrets).stdout.decode().strip()
        finally:
            self.invalidate()

    def ps(self, label: str, fresh: bool = False) -> dict[str, Container]:
        """Every container (running or not) carrying ``label`` (``key=value``), by name."""
        now = time.monotonic()
        with self._ps_lock:
            if not fresh and self._ps and self._ps[1] == label and now - self._ps[0] < self.PS_TTL_S:
                return self._ps[2]
            generation = self._generation
        raw = self.cli("ps", "-a", "--filter", f"label={label}", "--format", "json").stdout.decode() or "[]"
        rows: list[dict[str, Any]] = (
            json.loads(raw) if raw.strip().startswith("[") else [json.loads(x) for x in raw.splitlines() if x.strip()]
        )
        out: dict[str, Container] = {}
        for r in rows:
            names = r.get("Names") or []
            name = names[0] if isinstance(names, list) and names else str(names).lstrip("/")
            labels = r.get("Labels") or {}
            if isinstance(labels, str):  # docker: "a=b,c=d"
                labels = dict(kv.split("=", 1) for kv in labels.split(",") if "=" in kv)
            state = str(r.get("State", "")).lower()
            code = r.get("ExitCode")
            finished = state in ("exited", "stopped")
            pid = r.get("Pid") or 0
            out[name] = Container(
                name, state, int(code) if code is not None and finished else None, labels, int(pid) if str(pid).isdigit() else 0
            )
        with self._ps_lock:
            if generation == self._generation:
                self._ps = (time.monotonic(), label, out)
        return out

    def stats(self) -> str:
        """Every running container's cgroup figures, in one call: the raw text of
        ``stats --no-stream`` (``usage.parse_stats`` reads it)."""
        fmt = "{{json .ContainerStats}}" if self.facts.binary == "podman" else "{{json .}}"
        return self.cli("stats", "--no-stream", "--format", fmt, timeout_s=60).stdout.decode()

    def inspect(self, name: str) -> dict[str, Any] | None:
        done = self.cli("inspect", "--type", "container", name, check=False)
        if done.returncode != 0:
            return None
        data = json.loads(done.stdout.decode() or "[]")
        return data[0] if data else None

    def finished_at(self, name: str) -> float | None:
        """When a container that exited ended (``State.FinishedAt``, epoch seconds), or None."""
        info = self.inspect(name) or {}
        return parse_time(str((info.get("State") or {}).get("FinishedAt") or ""))

    def host_ports(self, name: str) -> dict[str, int]:
        """Published ports: container port (text) -> host port."""
        return ports_of(self.inspect(name) or {})

    def address(self, name: str, network: str) -> str | None:
        info = self.inspect(name) or {}
        net = ((info.get("NetworkSettings") or {}).get("Networks") or {}).get(network) or {}
        return net.get("IPAddress") or None

    def kill(self, name: str, sig: str) -> None:
        self.cli("kill", "--signal", sig, name, check=False)

    def stop(self, name: str, grace_s: float) -> None:
        """TERM to the container's init (forwarded to the workload), KILL after ``grace_s``."""
        try:
            self.cli("stop", "-t", str(max(0, int(round(grace_s)))), name, timeout_s=grace_s + 60, check=False)
        finally:
            self.invalidate()

    def remove(self, name: str) -> None:
        try:
            self.cli("rm", "-f", name, check=False, timeout_s=60)
        finally:
            self.invalidate()

    def exec(self, name: str, argv: list[str], timeout_s: float) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                [self.facts.binary, "exec", name, *argv], capture_output=True, timeout=timeout_s, stdin=subprocess.DEVNULL
            )
        except subprocess.TimeoutExpired:
            raise
        except OSError as exc:
            raise BackendError(f"cannot run {self.facts.binary}: {exc}") from exc

    # -- images and networks -----------------------------------------------------------------
    def image_exists(self, ref: str) -> bool:
        if self.facts.binary == "podman":
            return self.cli("image", "exists", ref, check=False).returncode == 0
        return self.cli("image", "inspect", ref, check=False).returncode == 0

    def ensure_network(self, name: str, labels: dict[str, str], ready: Callable[[str], None] = lambda iface: None) -> str:
        """A bridge network isolated from every other network of the engine; returns the
        host-side interface name (for the firewall rule that keeps it off host services).

        Podman picks a new network's subnet and bridge by reading the networks that exist,
        so two creates at once (two launches, two servers on one host) can get the same
        bridge: two tenants on one wire. Creates therefore take a host-wide lock, and a new
        network that still shares a bridge or subnet with another is removed and made again.
        ``ready(iface)`` runs under the same lock (the firewall rules of the bridge), so a
        bridge name reused after another server removed its network is never left bare."""
        with host_lock():
            for _ in range(3):
                net = self._inspect_network(name)
                if net is None:
                    opts = (
                        ["--opt", "isolate=true", "--disable-dns"]
                        if self.facts.binary == "podman"
                        else ["--opt", "com.docker.network.bridge.enable_icc=true"]
                    )
                    lab = [a for k, v in labels.items() for a in ("--label", f"{k}={v}")]
                    made = self.cli("network", "create", *opts, *lab, name, check=False)
                    if made.returncode != 0 and b"already exists" not in made.stderr:
                        raise BackendError(f"cannot create network {name}: {made.stderr.decode(errors='replace').strip()}")
                    net = self._inspect_network(name)
                assert net is not None
                clash = self._clash(name, net)
                if clash is None:
                    ready(_iface(net))
                    return _iface(net)
                if self._in_use(name):
                    raise BackendError(f"network {name} shares {clash} with another network and is in use")
                self.cli("network", "rm", name, check=False)
            raise BackendError(f"network {name}: could not get a bridge and subnet of its own")

    def _inspect_network(self, name: str) -> dict | None:
        info = self.cli("network", "inspect", name, check=False)
        if info.returncode != 0:
            return None
        data = json.loads(info.stdout.decode())
        return data[0] if isinstance(data, list) else data

    def _clash(self, name: str, net: dict) -> str | None:
        """What ``net`` shares with another network of the engine: its bridge or a subnet."""
        if self.facts.binary != "podman":  # Docker Engine allocates under its daemon's lock
            return None
        mine_if, mine_nets = _iface(net), _subnets(net)
        listed = json.loads(self.cli("network", "ls", "--format", "json").stdout.decode() or "[]")
        for other in listed:
            if other.get("name") == name:
                continue
            if mine_if and _iface(other) == mine_if:
                return f"bridge {mine_if} with {other.get('name')}"
            for a in mine_nets:
                if any(a.overlaps(b) for b in _subnets(other)):
                    return f"subnet {a} with {other.get('name')}"
        return None

    def remove_network(self, name: str, released: Callable[[str], None] = lambda iface: None) -> bool:
        """Delete a network; ``released(iface)`` runs, under the host lock, only if no other
        network has taken its bridge name meanwhile."""
        with host_lock():
            net = self._inspect_network(name)
            if net is None or self.cli("network", "rm", name, check=False).returncode != 0:
                return False
            listed = json.loads(self.cli("network", "ls", "--format", "json").stdout.decode() or "[]")
            if _iface(net) not in {_iface(n) for n in listed}:
                released(_iface(net))
            return True

    def _in_use(self, name: str) -> bool:
        done = self.cli("ps", "-a", "--filter", f"network={name}", "--format", "{{.Names}}", check=False)
        return bool(done.stdout.strip())


#: Serialises network creation between the Suanli servers of one host.
HOST_LOCK = Path(os.environ.get("SUANLI_HOST_LOCK", "/run/lock/suanli-networks.lock"))


@contextmanager
def host_lock() -> Iterator[None]:
    path = HOST_LOCK if os.access(HOST_LOCK.parent, os.W_OK) else Path(tempfile.gettempdir()) / HOST_LOCK.name
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _iface(net: dict) -> str:
    iface = net.get("network_interface") or (net.get("Options") or {}).get("com.docker.network.bridge.name")
    if not iface and net.get("Id"):
        iface = "br-" + str(net["Id"])[:12]
    return str(iface or "")


def _subnets(net: dict) -> list[ipaddress.IPv4Network | ipaddress.IPv6Network]:
    raw = [s.get("subnet") for s in net.get("subnets") or []]
    raw += [c.get("Subnet") for c in ((net.get("IPAM") or {}).get("Config") or [])]
    return [ipaddress.ip_network(x, strict=False) for x in raw if x]


def detect(preferred: str | None = None) -> Engine | None:
    """The engine of this host: Podman first (daemonless), else a Docker Engine that answers.
    ``preferred``: ``podman`` or ``docker`` only. It answers if it can list containers (its
    store, or Docker's daemon, is there): ``ps``, not ``info``, which for Podman asks the
    package manager for its parts' versions: a quarter of a CPU-second, where ``ps`` takes a
    sixth of that, in every process of a server and every test server (issue 11)."""
    for binary in [preferred] if preferred else ["podman", "docker"]:
        if not shutil.which(binary):
            continue
        facts = EngineFacts(binary) if binary == "podman" else EngineFacts(binary, oci_runtime=None)
        engine = Engine(facts)
        try:
            if engine.cli("ps", "--all", "--quiet", "--filter", "label=suanli.detect", timeout_s=30, check=False).returncode == 0:
                return engine
        except BackendError:
            continue
    return None


def ports_of(info: dict[str, Any]) -> dict[str, int]:
    """The published ports in an ``inspect`` answer: container port (text) -> host port."""
    out: dict[str, int] = {}
    for cport, binds in ((info.get("NetworkSettings") or {}).get("Ports") or {}).items():
        for b in binds or []:
            if b.get("HostPort"):
                out[cport.split("/")[0]] = int(b["HostPort"])
    return out


def parse_time(text: str) -> float | None:
    """An engine's RFC 3339 time with nanoseconds (``2026-12-02T06:00:00.123456789Z``,
    ``...+01:00``) as epoch seconds; None for an empty or zero time (``0001-01-01...``)."""
    m = re.match(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?\s*(Z|[+-]\d\d:?\d\d)?", text.strip())
    if m is None or m.group(1).startswith("0001-"):
        return None
    zone = m.group(3) or "Z"
    zone = "+00:00" if zone == "Z" else (zone if ":" in zone else zone[:3] + ":" + zone[3:])
    try:
        t = datetime.fromisoformat(m.group(1) + zone).timestamp()
    except ValueError:
        return None
    return t + (float("0." + m.group(2)) if m.group(2) else 0.0)

"""TLS for the server's listeners: uvicorn's own (``--tls-cert``/``--tls-key``), HSTS on
every response once it is on, and a clear warning when the server listens beyond loopback
without it (tokens and secrets would cross the network in clear text).

The API and the port proxy serve the same certificate: the proxy's cookie is ``Secure``
when TLS is on, so a browser never sends a proxy pass over plain HTTP.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request, Response

#: One year, and for the proxy's per-port subdomains too: what browsers' preload lists ask.
HSTS = "max-age=31536000; includeSubDomains"


@dataclass(frozen=True)
class Tls:
    """A certificate chain and its private key (PEM files), checked to exist."""

    cert: Path
    key: Path

    @classmethod
    def of(cls, cert: Path | None, key: Path | None) -> Tls | None:
        if cert is None and key is None:
            return None
        if cert is None or key is None:
            raise ValueError("TLS needs both --tls-cert and --tls-key")
        for what, path in (("--tls-cert", cert), ("--tls-key", key)):
            if not Path(path).is_file():
                raise ValueError(f"{what}: {path} is not a file")
        return cls(Path(cert).resolve(), Path(key).resolve())

    def uvicorn_options(self) -> dict[str, Any]:
        return {"ssl_certfile": str(self.cert), "ssl_keyfile": str(self.key)}


def is_loopback(host: str) -> bool:
    """``127.0.0.1``, ``::1``, ``localhost``: only this machine reaches the listener."""
    if host.strip("[]").lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: whatever it resolves to, assume the network


def plain_warning(host: str) -> str | None:
    """What the server says when it listens beyond loopback without TLS (None: nothing to say)."""
    if is_loopback(host):
        return None
    return (
        f"WARNING: listening on {host} without TLS: API tokens, console sessions and workload secrets "
        "cross the network in clear text. Pass --tls-cert and --tls-key (or put a TLS proxy in front "
        "and listen on 127.0.0.1)."
    )


def install_hsts(app: FastAPI) -> None:
    """Every response says ``Strict-Transport-Security``: browsers then refuse plain HTTP here."""

    @app.middleware("http")
    async def _hsts(request: Request, call_next: Any) -> Response:
        response: Response = await call_next(request)
        response.headers.setdefault("Strict-Transport-Security", HSTS)
        return response

"""Test factories for the control-plane suite (imported by conftest and tests)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from fastapi.testclient import TestClient

from suanli.api.app import create_app
from suanli.api.context import ServerContext
from suanli.api.server import build
from suanli.client import SuanliClient


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
        self.http.close()
        self.ctx.db.dispose()


def start_server(data_dir: Path, db_url: str, **kw: Any) -> Server:
    kw.setdefault("interval_s", 0.1)
    kw.setdefault("stop_grace_s", 2.0)
    ctx, boot = build(data_dir, db_url, **kw)
    assert boot.admin_token
    return Server(ctx, TestClient(create_app(ctx)), boot.admin_token, data_dir)


def wait_until(predicate: Callable[[], Any], timeout_s: float = 20.0, every_s: float = 0.1) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {predicate}")
        time.sleep(every_s)


def wait_state(srv: Server, kind: str, obj_id: int, states: tuple[str, ...], timeout_s: float = 20.0) -> dict:
    path = f"/v1/{kind}s/{obj_id}"
    return wait_until(lambda: (o := srv.get(path))["state"] in states and o, timeout_s)

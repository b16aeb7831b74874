"""A small synchronous client for the Suanli HTTP API (what the CLI uses).

It wraps an ``httpx.Client``; pass one in to talk to something other than a
URL — e.g. FastAPI's ``TestClient`` (an ``httpx.Client`` bound to the ASGI app)
so CLI tests run in-process against the real app. Every non-2xx answer becomes
an ``ApiError`` with the server's stable error ``code``.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

DEFAULT_URL = "http://127.0.0.1:8470"


class ApiError(Exception):
    def __init__(self, status: int, code: str, message: str) -> None:
        super().__init__(f"{code}: {message}")
        self.status, self.code, self.message = status, code, message


def _check(r: httpx.Response) -> None:
    """A non-2xx answer as ``ApiError`` with the server's stable code."""
    if r.status_code >= 400:
        try:
            err = r.json()["error"]
            raise ApiError(r.status_code, err.get("code", "error"), err.get("message", r.text))
        except (ValueError, KeyError, TypeError):
            raise ApiError(r.status_code, "http_error", r.text[:500]) from None


def config_path() -> Path:
    if os.environ.get("SUANLI_CONFIG"):
        return Path(os.environ["SUANLI_CONFIG"])
    base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "suanli" / "config.json"


@dataclass
class Settings:
    url: str
    token: str | None


def load_settings() -> Settings:
    """The config file from ``suanli login``, overridden by SUANLI_URL / SUANLI_TOKEN."""
    saved: dict[str, Any] = {}
    try:
        saved = json.loads(config_path().read_text())
    except (FileNotFoundError, ValueError):
        pass
    return Settings(
        url=os.environ.get("SUANLI_URL") or saved.get("url") or DEFAULT_URL,
        token=os.environ.get("SUANLI_TOKEN") or saved.get("token"),
    )


def save_settings(settings: Settings) -> Path:
    path = config_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump({"url": settings.url, "token": settings.token}, f)
    return path


class SuanliClient:
    def __init__(
        self, url: str = DEFAULT_URL, token: str | None = None, http: httpx.Client | None = None, timeout: float = 60.0
    ) -> None:
        self.url = url.rstrip("/")
        self.http = http or httpx.Client(base_url=self.url, timeout=timeout)
        self.token = token

    @classmethod
    def from_settings(cls) -> SuanliClient:
        s = load_settings()
        return cls(s.url, s.token)

    # -- plumbing ----------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def request(self, method: str, path: str, **kwargs: Any) -> Any:
        try:
            r = self.http.request(method, path, headers=self._headers(), **kwargs)
        except httpx.TransportError as exc:
            raise ApiError(0, "unreachable", f"cannot reach {self.url}: {exc}") from None
        _check(r)
        return r.json() if r.content else None

    def pages(self, path: str, params: dict[str, Any] | None = None, limit: int = 1000) -> list[dict]:
        """Every row of a paged list: page after page, following ``X-Next-Cursor``
        (the server's ``api.paging``) until a page comes without one."""
        rows: list[dict] = []
        query: dict[str, Any] = {**(params or {}), "limit": limit}
        while True:
            try:
                r = self.http.request("GET", path, headers=self._headers(), params=query)
            except httpx.TransportError as exc:
                raise ApiError(0, "unreachable", f"cannot reach {self.url}: {exc}") from None
            _check(r)
            rows.extend(r.json())
            cursor = r.headers.get("x-next-cursor")
            if not cursor:
                return rows
            query["cursor"] = cursor

    # -- API ---------------------------------------------------------------------------
    def me(self) -> dict:
        return self.request("GET", "/v1/me")

    def gpus(self) -> list[dict]:
        return self.request("GET", "/v1/gpus")

    def nodes(self) -> list[dict]:
        return self.pages("/v1/nodes")

    def add_nodes(self, inventory: dict) -> list[dict]:
        return self.request("POST", "/v1/nodes", json=inventory)

    def set_node_state(self, name: str, state: str) -> dict:
        return self.request("PATCH", f"/v1/nodes/{name}", json={"state": state})

    def add_verification(self, name: str, report: dict, uncordon: bool = False) -> dict:
        return self.request("POST", f"/v1/nodes/{name}/verifications", json={"report": report, "uncordon": uncordon})

    def start_verify_run(self, name: str, uncordon: bool = False, quick: bool = False, image: str | None = None) -> dict:
        body = {"uncordon": uncordon, "quick": quick, "image": image}
        return self.request("POST", f"/v1/nodes/{name}/verify-runs", json=body)

    def verify_run(self, name: str, run_id: int) -> dict:
        return self.request("GET", f"/v1/nodes/{name}/verify-runs/{run_id}")

    def verifications(self, name: str, limit: int = 50, full: bool = False) -> list[dict]:
        return self.request(
            "GET", f"/v1/nodes/{name}/verifications", params={"limit": limit, "full": "true" if full else "false"}
        )

    def heartbeat(self, name: str) -> dict:
        return self.request("POST", f"/v1/nodes/{name}/heartbeat")

    def create_instance(self, **body: Any) -> dict:
        return self.request("POST", "/v1/instances", json={k: v for k, v in body.items() if v is not None})

    def set_webhook(self, tenant: str, url: str, secret: str | None = None) -> dict:
        body = {"url": url, **({"secret": secret} if secret else {})}
        return self.request("PUT", f"/v1/tenants/{tenant}/webhook", json=body)

    def webhook(self, tenant: str) -> dict:
        return self.request("GET", f"/v1/tenants/{tenant}/webhook")

    def remove_webhook(self, tenant: str) -> dict:
        return self.request("DELETE", f"/v1/tenants/{tenant}/webhook")

    def set_tenant_autostop(self, tenant: str, autostop_s: int | None) -> dict:
        return self.request("PUT", f"/v1/tenants/{tenant}/autostop", json={"autostop_s": autostop_s})

    def metrics_history(self, kind: str, workload_id: int, since: float | None = None) -> list[dict]:
        """``kind``: ``instances`` or ``jobs``; ``since``: epoch seconds (default: the last hour)."""
        return self.request("GET", f"/v1/{kind}/{workload_id}/metrics", params={"since": since} if since is not None else None)

    def alerts(self, tenant: str | None = None, limit: int = 200) -> list[dict]:
        """The latest ``limit`` alerts (at most 1000), oldest first."""
        return self.request("GET", "/v1/alerts", params={"tenant": tenant, "limit": limit} if tenant else {"limit": limit})

    def instances(self, include_deleted: bool = False) -> list[dict]:
        return self.pages("/v1/instances", {"all": include_deleted})

    def instance(self, instance_id: int) -> dict:
        return self.request("GET", f"/v1/instances/{instance_id}")

    def stop_instance(self, instance_id: int) -> dict:
        return self.request("POST", f"/v1/instances/{instance_id}/stop")

    def start_instance(self, instance_id: int) -> dict:
        return self.request("POST", f"/v1/instances/{instance_id}/start")

    def delete_instance(self, instance_id: int) -> dict:
        return self.request("DELETE", f"/v1/instances/{instance_id}")

    def exec(self, instance_id: int, command: str, timeout_s: float = 60.0) -> dict:
        return self.request("POST", f"/v1/instances/{instance_id}/exec", json={"command": command, "timeout_s": timeout_s})

    def instance_logs(self, instance_id: int, tail_bytes: int | None = None) -> str:
        return self.request("GET", f"/v1/instances/{instance_id}/logs", params=_tail(tail_bytes))["text"]

    def launch(self, task: dict) -> dict:
        return self.request("POST", "/v1/jobs", json=task)

    def launch_pipeline(self, jobs: list[dict], name: str = "") -> list[dict]:
        """Jobs that depend on each other, or a sweep: created all or nothing."""
        return self.request("POST", "/v1/pipelines", json={"name": name, "jobs": jobs})

    def jobs(self, state: str | None = None) -> list[dict]:
        return self.pages("/v1/jobs", {"state": state} if state else None)

    def job(self, job_id: int) -> dict:
        return self.request("GET", f"/v1/jobs/{job_id}")

    def cancel_job(self, job_id: int) -> dict:
        return self.request("POST", f"/v1/jobs/{job_id}/cancel")

    def job_logs(self, job_id: int, tail_bytes: int | None = None) -> str:
        return self.request("GET", f"/v1/jobs/{job_id}/logs", params=_tail(tail_bytes))["text"]

    def events(self, kind: str | None = None, object_id: int | None = None, limit: int = 200) -> list[dict]:
        """The latest ``limit`` events (at most 1000), oldest first."""
        params = {k: v for k, v in {"kind": kind, "object_id": object_id, "limit": limit}.items() if v is not None}
        return self.request("GET", "/v1/events", params=params)

    def create_user(self, name: str, role: str = "member", tenant: str | None = None, password: str | None = None) -> dict:
        return self.request("POST", "/v1/users", json={"name": name, "role": role, "tenant": tenant, "password": password})

    def users(self, tenant: str | None = None) -> list[dict]:
        return self.pages("/v1/users", {"tenant": tenant} if tenant else None)

    def change_user(self, user: str, **body: Any) -> dict:
        """Admins: ``disabled``, ``password``, ``reset_2fa``."""
        return self.request("PATCH", f"/v1/users/{user}", json=body)

    def create_tenant(self, name: str, require_2fa: bool = False) -> dict:
        return self.request("POST", "/v1/tenants", json={"name": name, "require_2fa": require_2fa})

    def tenants(self) -> list[dict]:
        return self.pages("/v1/tenants")

    def change_tenant(self, tenant: str, require_2fa: bool) -> dict:
        return self.request("PATCH", f"/v1/tenants/{tenant}", json={"require_2fa": require_2fa})

    def create_token(self, **body: Any) -> dict:
        """``name``, ``scopes``, ``expires_in_days``, ``tenant``; the answer's ``token`` is shown once."""
        return self.request("POST", "/v1/tokens", json=body)

    def tokens(self, everyone: bool = False) -> list[dict]:
        return self.pages("/v1/tokens", {"all": "true"} if everyone else None)

    def revoke_token(self, token_id: int) -> dict:
        return self.request("DELETE", f"/v1/tokens/{token_id}")

    def audit(self, **params: Any) -> list[dict]:
        """``tenant_id``, ``actor``, ``action`` (a prefix), ``since``, ``after``, ``limit``."""
        return self.request("GET", "/v1/audit", params={k: v for k, v in params.items() if v is not None})

    def audit_verify(self) -> dict:
        return self.request("GET", "/v1/audit/verify")

    def audit_export(self, since: str | None = None) -> Any:
        """The records as JSON lines, an iterator of lines (it streams)."""
        with self.http.stream(
            "GET", "/v1/audit/export", params={"since": since} if since else None, headers=self._headers()
        ) as r:
            if r.status_code >= 400:
                r.read()
                _check(r)
            yield from r.iter_lines()

    def topup(self, tenant: str, amount: str, key: str | None = None) -> dict:
        """Credit a tenant's prepaid balance (operators); a repeated ``key`` posts nothing."""
        return self.request("POST", "/v1/billing/topups", json={"tenant": tenant, "amount": amount, "key": key})

    def add_key(self, public_key: str, name: str = "") -> dict:
        return self.request("POST", "/v1/keys", json={"public_key": public_key, "name": name})

    def keys(self) -> list[dict]:
        return self.pages("/v1/keys")

    def remove_key(self, key_id: int | str) -> dict:
        from urllib.parse import quote  # a fingerprint holds '/' and '+'

        return self.request("DELETE", f"/v1/keys/{quote(str(key_id), safe='')}")

    def upload_limit(self) -> dict:
        """The server's cap on an upload: ``{"max_bytes": N, "max_unpacked_bytes": M}``."""
        return self.request("GET", "/v1/uploads/limit")

    def upload_info(self, upload_id: str) -> dict | None:
        """``{"id", "size"}`` if this tenant already uploaded that archive, else None."""
        try:
            return self.request("GET", f"/v1/uploads/{upload_id}")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def upload(self, path: Path | str, progress: Any = None, chunk_bytes: int = 1 << 20) -> dict:
        """Stream a gzip tar to ``POST /v1/uploads`` (never read whole into memory);
        ``progress(sent, total)`` is called after each chunk. Returns ``{"id", "size"}``."""
        total = Path(path).stat().st_size

        def chunks() -> Any:
            sent = 0
            with open(path, "rb") as f:
                while chunk := f.read(chunk_bytes):
                    yield chunk
                    sent += len(chunk)
                    if progress is not None:
                        progress(sent, total)

        headers = {"Content-Type": "application/gzip", "Content-Length": str(total)}
        if self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        try:
            r = self.http.request("POST", "/v1/uploads", content=chunks(), headers=headers)
        except httpx.TransportError as exc:  # the server may close early on a body over its cap
            raise ApiError(0, "unreachable", f"upload to {self.url} broke off: {exc}") from None
        _check(r)
        return r.json()

    def images(self) -> list[dict]:
        """The catalog, the default image first, then by name."""
        return sorted(self.pages("/v1/images"), key=lambda r: (not r.get("default"), r["name"]))

    def add_image(self, name: str, ref: str, description: str = "", contents: dict | None = None, default: bool = False) -> dict:
        body = {"name": name, "ref": ref, "description": description, "contents": contents or {}, "default": default}
        return self.request("POST", "/v1/images", json=body)

    def set_default_image(self, name: str) -> dict:
        return self.request("PATCH", f"/v1/images/{name}", json={"default": True})

    def remove_image(self, name: str) -> dict:
        return self.request("DELETE", f"/v1/images/{name}")


def _tail(tail_bytes: int | None) -> dict | None:
    return {"tail_bytes": tail_bytes} if tail_bytes else None

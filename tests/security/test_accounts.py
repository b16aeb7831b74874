"""Accounts: the CLI's onboarding contract, tokens (scopes, pins, expiry, revocation, a
cap), roles a member cannot lift, brute force throttled, console sign-in with a second
factor that cannot be skipped, and ``/metrics`` closed to strangers."""

from __future__ import annotations

import json
import time
from typing import Any

import pyotp
import pytest
from sqlalchemy import func, select

from suanli.billing.tables import Grant as BillingGrant
from suanli.billing.tables import PriceVersion
from suanli.control import tokens
from suanli.db.models import ApiToken, Instance, Tenant
from tests.control.control_helpers import Server


@pytest.fixture
def server(quiet_server: Server) -> Server:
    return quiet_server


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def onboard(cli: Any, tenant: str = "acme", user: str = "bob", role: str = "member") -> dict:
    cli("tenants", "create", tenant, "--json")
    return json.loads(cli("users", "create", user, "--tenant", tenant, "--role", role, "--json"))


def test_cli_onboards_a_renter_as_the_contract_says(server: Server, cli: Any) -> None:
    t = json.loads(cli("tenants", "create", "acme", "--json"))
    assert set(t) >= {"id", "name"} and t["name"] == "acme"
    u = json.loads(cli("users", "create", "bob", "--tenant", "acme", "--role", "member", "--json"))
    assert set(u) >= {"id", "token"} and u["tenant_id"] == t["id"]
    me = server.http.get("/v1/me", headers=bearer(u["token"])).json()
    assert (me["name"], me["role"], me["tenant_id"]) == ("bob", "member", t["id"])
    assert "acme" in cli("tenants", "list") and "bob" in cli("users", "list", "--tenant", "acme")
    assert "exists" in cli("tenants", "create", "acme", code=1)


def test_tokens_are_listed_without_their_secret_and_a_revoked_one_is_refused_at_once(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    made = server.http.post("/v1/tokens", json={"name": "ci"}, headers=bearer(bob["token"]))
    assert made.status_code == 201 and {"id", "token"} <= set(made.json())
    tok = made.json()
    assert server.http.get("/v1/me", headers=bearer(tok["token"])).status_code == 200  # now in the server's cache
    listed = json.loads(cli("tokens", "list", "--json", token=bob["token"]))
    assert [t["name"] for t in listed] == ["ci", "first token"] and tok["token"] not in json.dumps(listed)
    assert "revoked token" in cli("tokens", "revoke", str(tok["id"]), token=bob["token"])
    r = server.http.get("/v1/me", headers=bearer(tok["token"]))
    assert r.status_code == 401 and "revoked" in r.json()["error"]["message"]
    # another user's token is not yours to revoke, and reads as absent
    assert "no token" in cli("tokens", "revoke", "1", code=1, token=bob["token"])
    assert server.http.get("/v1/me", headers=server.headers).status_code == 200


def test_an_expired_token_is_refused_even_from_the_cache(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    tok = server.http.post("/v1/tokens", json={"expires_in_days": 1 / 86400}, headers=bearer(bob["token"])).json()
    assert server.http.get("/v1/me", headers=bearer(tok["token"])).status_code == 200
    time.sleep(1.1)
    assert server.http.get("/v1/me", headers=bearer(tok["token"])).status_code == 401
    assert [t["state"] for t in server.http.get("/v1/tokens", headers=bearer(bob["token"])).json()][0] == "expired"


def test_scopes_narrow_a_token_and_a_scoped_token_cannot_make_a_wider_one(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    ro = server.http.post("/v1/tokens", json={"scopes": ["read"]}, headers=bearer(bob["token"])).json()
    assert server.http.get("/v1/instances", headers=bearer(ro["token"])).status_code == 200
    r = server.http.post("/v1/keys", json={"public_key": "ssh-ed25519 AAAA x"}, headers=bearer(ro["token"]))
    assert r.status_code == 403 and "scopes" in r.json()["error"]["message"]
    keys_only = server.http.post("/v1/tokens", json={"scopes": ["route:/v1/keys"]}, headers=bearer(bob["token"])).json()
    assert server.http.get("/v1/keys", headers=bearer(keys_only["token"])).status_code == 200
    assert server.http.get("/v1/instances", headers=bearer(keys_only["token"])).status_code == 403
    # made by the read-only token: read-only too, whatever it asks for
    r = server.http.post("/v1/tokens", json={"scopes": []}, headers=bearer(ro["token"]))
    assert r.status_code == 403  # minting is a POST: the read scope refuses it outright
    child = server.http.post("/v1/tokens", json={"scopes": ["route:/v1/tokens"]}, headers=bearer(keys_only["token"]))
    assert child.status_code == 403
    bad = server.http.post("/v1/tokens", json={"scopes": ["admin"]}, headers=bearer(bob["token"]))
    assert bad.status_code == 422 and "scope" in bad.json()["error"]["message"]


def test_a_token_pinned_to_a_tenant_sees_only_it_and_has_no_operator_rights(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    server.post("/v1/billing/topups", {"tenant": "acme", "amount": "100"}, expect=201)
    r = server.http.post("/v1/instances", json={"gpu_model": "H100", "gpu_count": 1}, headers=bearer(bob["token"]))
    assert r.status_code == 201, r.text
    server.post("/v1/instances", {"cpus": 1, "memory_gib": 1, "gpu_model": "H100", "gpu_count": 1}, expect=201)  # the admin's own
    pinned = json.loads(cli("tokens", "create", "--tenant", "acme", "--name", "support", "--json"))
    seen = server.http.get("/v1/instances", headers=bearer(pinned["token"])).json()
    assert [i["id"] for i in seen] == [r.json()["id"]]
    r = server.http.post("/v1/billing/topups", json={"tenant": "acme", "amount": "5"}, headers=bearer(pinned["token"]))
    assert r.status_code == 403 and "one tenant" in r.json()["error"]["message"]
    # a member cannot pin to another tenant: the same answer as for one that does not exist
    a = server.http.post("/v1/tokens", json={"tenant": "default"}, headers=bearer(bob["token"]))
    b = server.http.post("/v1/tokens", json={"tenant": "nosuch"}, headers=bearer(bob["token"]))
    assert a.status_code == b.status_code == 404
    assert a.json()["error"]["code"] == b.json()["error"]["code"]


def test_a_user_holds_a_bounded_number_of_tokens(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    for _ in range(tokens.MAX_ACTIVE - 1):
        assert server.http.post("/v1/tokens", headers=bearer(bob["token"])).status_code == 201
    r = server.http.post("/v1/tokens", headers=bearer(bob["token"]))
    assert r.status_code == 409 and r.json()["error"]["code"] == "too_many_tokens"
    with server.ctx.db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(ApiToken).where(ApiToken.user_id == bob["id"])) == tokens.MAX_ACTIVE


def test_a_member_cannot_lift_an_operators_setting(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    h = bearer(bob["token"])
    with server.ctx.db.sessions() as s:
        before = (
            s.scalar(select(func.count()).select_from(PriceVersion)),
            s.scalar(select(func.count()).select_from(BillingGrant)),
        )
    attempts = [
        ("POST", "/v1/billing/topups", {"tenant": "acme", "amount": "1000"}),
        ("PUT", "/v1/billing/prices", {"gpu_model": "H100", "plan": "on_demand", "price": "0.01"}),
        ("POST", "/v1/billing/grants", {"tenant": "acme", "gpu_model": "H100", "max_gpus": 64}),
        ("PUT", "/v1/billing/terms", {"tenant": "acme", "terms": "postpaid"}),
        ("PATCH", "/v1/tenants/acme", {"require_2fa": False}),
        ("POST", "/v1/users", {"name": "mallory", "tenant": "acme", "role": "admin"}),
        ("PATCH", "/v1/users/admin", {"disabled": True}),
        ("GET", "/v1/audit", None),
        ("GET", "/v1/tokens?all=true", None),
    ]
    for method, path, body in attempts:
        r = server.http.request(method, path, json=body, headers=h)
        assert r.status_code == 403, (method, path, r.status_code, r.text)
    with server.ctx.db.sessions() as s:
        after = (
            s.scalar(select(func.count()).select_from(PriceVersion)),
            s.scalar(select(func.count()).select_from(BillingGrant)),
        )
        assert after == before
        assert s.scalar(select(Tenant.require_2fa).where(Tenant.name == "acme")) is False
    assert "admin" in cli("users", "list")


def test_bad_tokens_are_throttled_with_retry_after(server: Server) -> None:
    codes = [server.http.get("/v1/me", headers=bearer(f"sl_guess{i}")).status_code for i in range(25)]
    assert codes[:20] == [401] * 20 and set(codes[20:]) == {429}
    r = server.http.get("/v1/me", headers=bearer("sl_guess-again"))
    assert r.status_code == 429 and 1 <= int(r.headers["Retry-After"]) <= 60
    assert r.json()["error"]["code"] == "throttled"


def _set_password(server: Server, user: str, password: str) -> None:
    r = server.http.patch(f"/v1/users/{user}", json={"password": password}, headers=server.headers)
    assert r.status_code == 200 and r.json()["has_password"] is True


def test_sign_in_with_a_password_gives_an_expiring_session_and_guessing_is_throttled(server: Server, cli: Any) -> None:
    onboard(cli)
    _set_password(server, "bob", "correct horse battery")
    r = server.http.post("/v1/sessions", json={"name": "bob", "password": "correct horse battery"})
    assert r.status_code == 201 and r.json()["must_enrol_2fa"] is False
    session = r.json()
    assert server.http.get("/v1/me", headers=bearer(session["token"])).json()["name"] == "bob"
    wrong = server.http.post("/v1/sessions", json={"name": "bob", "password": "wrong password"})
    nobody = server.http.post("/v1/sessions", json={"name": "nobody", "password": "wrong password"})
    assert wrong.status_code == nobody.status_code == 401 and wrong.json() == nobody.json()  # tells nothing
    for _ in range(9):
        server.http.post("/v1/sessions", json={"name": "bob", "password": "another guess"})
    r = server.http.post("/v1/sessions", json={"name": "bob", "password": "correct horse battery"})
    assert r.status_code == 429 and int(r.headers["Retry-After"]) > 0
    assert server.http.delete("/v1/sessions/current", headers=bearer(session["token"])).status_code == 204
    assert server.http.get("/v1/me", headers=bearer(session["token"])).status_code == 401


def test_second_factor_cannot_be_skipped_where_the_tenant_requires_it(server: Server, cli: Any) -> None:
    onboard(cli)
    _set_password(server, "bob", "correct horse battery")
    cli("tenants", "require-2fa", "acme")
    login = {"name": "bob", "password": "correct horse battery"}
    first = server.http.post("/v1/sessions", json=login).json()
    assert first["must_enrol_2fa"] is True
    h = bearer(first["token"])
    assert server.http.get("/v1/instances", headers=h).status_code == 403  # a session that may only enrol
    enrol = server.http.post("/v1/me/2fa", headers=h)
    assert enrol.status_code == 201
    totp = pyotp.TOTP(enrol.json()["secret"])
    assert server.http.post("/v1/me/2fa/confirm", json={"code": "000000"}, headers=h).status_code == 403
    assert server.http.post("/v1/me/2fa/confirm", json={"code": totp.now()}, headers=h).status_code == 200
    with server.ctx.db.sessions() as s:  # the secret is sealed in the database
        from suanli.db.models import User

        stored = s.scalar(select(User.totp_secret).where(User.name == "bob"))
    assert stored and enrol.json()["secret"] not in stored
    assert server.http.post("/v1/sessions", json=login).status_code == 401  # no code
    assert (
        server.http.post("/v1/sessions", json={**login, "code": "123456" if totp.now() != "123456" else "654321"}).status_code
        == 401
    )
    next_code = totp.at(time.time() + totp.interval)  # the confirming code is spent; a clock 30 s ahead is allowed
    full = server.http.post("/v1/sessions", json={**login, "code": next_code})
    assert full.status_code == 201 and full.json()["must_enrol_2fa"] is False
    assert server.http.post("/v1/sessions", json={**login, "code": next_code}).status_code == 401  # a code is good once
    assert server.http.get("/v1/instances", headers=bearer(full.json()["token"])).status_code == 200


def test_a_disabled_user_is_refused_at_once(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    _set_password(server, "bob", "correct horse battery")
    assert server.http.get("/v1/me", headers=bearer(bob["token"])).status_code == 200
    cli("users", "disable", "bob")
    assert server.http.get("/v1/me", headers=bearer(bob["token"])).status_code == 401
    assert server.http.post("/v1/sessions", json={"name": "bob", "password": "correct horse battery"}).status_code == 401
    cli("users", "disable", "bob", "--enable")
    assert server.http.get("/v1/me", headers=bearer(bob["token"])).status_code == 200


def test_metrics_need_an_operator_from_off_this_machine(server: Server, cli: Any) -> None:
    bob = onboard(cli)
    assert server.http.get("/metrics").status_code == 401
    assert server.http.get("/metrics", headers=bearer(bob["token"])).status_code == 403
    assert "suanli_http_requests" in server.http.get("/metrics", headers=server.headers).text
    with server.ctx.db.sessions() as s:
        assert s.scalar(select(func.count()).select_from(Instance)) == 0


def test_key_rotation_reseals_second_factor_secrets(server: Server, cli: Any) -> None:
    from suanli.control import rekey
    from suanli.db.models import User

    bob = onboard(cli)
    _set_password(server, "bob", "correct horse battery")
    h = bearer(bob["token"])
    totp = pyotp.TOTP(server.http.post("/v1/me/2fa", headers=h).json()["secret"])
    assert server.http.post("/v1/me/2fa/confirm", json={"code": totp.now()}, headers=h).status_code == 200
    done = rekey.rotate(server.ctx.db, server.data_dir)
    assert done.resealed >= 1
    with server.ctx.db.sessions() as s:
        assert s.scalar(select(User.totp_secret).where(User.name == "bob")).split(".")[1] == done.new
    login = {"name": "bob", "password": "correct horse battery", "code": totp.at(time.time() + totp.interval)}
    assert server.http.post("/v1/sessions", json=login).status_code == 201  # the running server opens it under the new key

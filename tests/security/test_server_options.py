"""The server's own exposure, probed on real processes: HTTPS with HSTS and ``Secure``
cookies when given a certificate, a warning when it listens beyond loopback without one,
and a database password that never reaches argv (its own or a child's) or its banner."""

from __future__ import annotations

import datetime
import ipaddress
import os
import ssl
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from suanli.api.tls import HSTS, is_loopback, plain_warning
from tests import http_helpers as web
from tests.control.control_helpers import (
    PortTaken,
    cli_command,
    free_port,
    on_fresh_ports,
    port_taken,
    release_data_dir,
    wait_until,
)
from tests.pg_helpers import PG_SKIP, fresh_pg_database

#: A wide terminal for the CLI's error boxes, so a message is one line to search.
WIDE = {**os.environ, "COLUMNS": "400"}


def trusting(cert: Path) -> ssl.SSLContext:
    return ssl.create_default_context(cafile=str(cert))


def self_signed(where: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and localhost (and the proxy's *.localhost), with its key."""
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "suanli-test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName(
                [x509.IPAddress(ipaddress.ip_address("127.0.0.1")), x509.DNSName("localhost"), x509.DNSName("*.localhost")]
            ),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = where / "cert.pem", where / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    key_path.chmod(0o600)
    return cert_path, key_path


@dataclass
class Running:
    proc: subprocess.Popen
    port: int
    proxy_port: int


@contextmanager
def server(data: Path, *args: str, env: dict[str, str] | None = None, cert: Path | None = None) -> Iterator[Running]:
    """``suanli server ARGS`` on free ports until the block ends, entered once it answers
    ``/healthz`` (over HTTPS trusting ``cert`` when given); started again on fresh ports
    when one was taken between ``free_port`` and the server's bind."""
    data.mkdir(parents=True, exist_ok=True)
    base = {k: v for k, v in os.environ.items() if k not in ("SUANLI_DATA_DIR", "SUANLI_DB")}
    running = on_fresh_ports(lambda: _start(data, args, {**base, **(env or {})}, cert), lambda: None)  # _start takes fresh ones
    try:
        yield running
    finally:
        _stop(running.proc, data)


def _start(data: Path, args: tuple[str, ...], env: dict[str, str], cert: Path | None) -> Running:
    log = data.parent / f"{data.name}.log"
    port, proxy_port = free_port(), free_port()
    with open(log, "wb") as out:
        proc = subprocess.Popen(
            cli_command(
                "server",
                "--data-dir",
                str(data),
                "--runtime",
                "process",
                "--port",
                str(port),
                "--proxy-port",
                str(proxy_port),
                *args,
            ),
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
        )
    url = f"{'https' if cert else 'http'}://127.0.0.1:{port}/healthz"

    def up() -> bool:
        if proc.poll() is not None:
            text = log.read_text()
            raise PortTaken(text) if port_taken(text) else AssertionError(text)
        return _get(url, cert) is not None

    try:
        wait_until(up, 60, 0.2)
    except PortTaken:
        _stop(proc, data)
        raise
    except BaseException as exc:
        _stop(proc, data)
        raise AssertionError(f"{exc}; the server's log:\n{log.read_text()[-3000:]}") from exc
    return Running(proc, port, proxy_port)


def _stop(proc: subprocess.Popen, data: Path) -> None:
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
    release_data_dir(data)


def test_tls_serves_https_with_hsts_and_a_secure_proxy_cookie(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    data = tmp_path / "data"
    with server(data, "--tls-cert", str(cert), "--tls-key", str(key), cert=cert) as running:
        port, proxy_port = running.port, running.proxy_port
        base = f"https://127.0.0.1:{port}"
        r = web.get(base + "/healthz", verify=trusting(cert))
        assert r.status_code == 200 and r.headers["strict-transport-security"] == HSTS
        with pytest.raises(httpx.TransportError):
            web.get(f"http://127.0.0.1:{port}/healthz", timeout=5).raise_for_status()  # no plain HTTP beside it
        token = (data / "admin-token").read_text().strip()
        auth = {"Authorization": f"Bearer {token}"}
        inst = web.post(
            base + "/v1/instances",
            json={"gpu_model": "h100", "gpu_count": 1, "ports": [8080]},
            headers=auth,
            verify=trusting(cert),
        ).json()
        assert inst["ports"]["8080"].startswith("https://"), inst
        r = web.get(
            f"https://127.0.0.1:{proxy_port}/?token={token}",
            headers={"Host": f"{inst['id']}-8080.localhost"},
            verify=trusting(cert),
        )
        cookie = r.headers.get("set-cookie", "")
        assert r.status_code == 307 and "secure" in cookie.lower() and "httponly" in cookie.lower(), (r.status_code, cookie)
        assert r.headers["strict-transport-security"] == HSTS
    assert "https://127.0.0.1" in (tmp_path / "data.log").read_text()


def _get(url: str, cert: Path | None = None) -> httpx.Response | None:
    try:
        return web.get(url, verify=trusting(cert) if cert else True, timeout=2)
    except httpx.TransportError:
        return None


def test_listening_beyond_loopback_without_tls_warns(tmp_path: Path) -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert plain_warning("127.0.0.1") is None and "without TLS" in (plain_warning("0.0.0.0") or "")
    with server(tmp_path / "data", "--host", "0.0.0.0"):
        pass
    log = (tmp_path / "data.log").read_text()
    assert "WARNING: listening on 0.0.0.0 without TLS" in log and "--tls-cert" in log, log


def test_a_tls_key_without_a_certificate_is_refused(tmp_path: Path) -> None:
    _, key = self_signed(tmp_path)
    done = subprocess.run(
        cli_command("server", "--data-dir", str(tmp_path / "d"), "--tls-key", str(key)),
        capture_output=True,
        text=True,
        timeout=60,
        env=WIDE,
    )
    assert done.returncode != 0 and "both --tls-cert and --tls-key" in done.stdout + done.stderr
    assert not (tmp_path / "d").exists()


def _cmdlines(pid: int) -> list[str]:
    """The argv of ``pid`` and of every process under it."""
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        if int(entry.name) == pid or ppid == pid:
            out.append(cmd)
    return out


@pytest.mark.postgres
@pytest.mark.skipif(PG_SKIP is not None, reason=PG_SKIP or "")
@pytest.mark.parametrize("source", ["env", "file"])
def test_a_database_password_stays_out_of_argv_and_the_banner(tmp_path: Path, source: str) -> None:
    url, drop = fresh_pg_database()
    password = "Pw-Sec-5t6y7u"  # the test server trusts loopback: any password connects
    with_pw = url.replace("://postgres@", f"://postgres:{password}@")
    assert password in with_pw
    args: tuple[str, ...] = ()
    env: dict[str, str] = {}
    if source == "env":
        env["SUANLI_DB"] = with_pw
    else:
        db_file = tmp_path / "db-url"
        db_file.write_text(f"# the server's database\n{with_pw}\n")
        db_file.chmod(0o600)
        args += ("--db-file", str(db_file))
    try:
        with server(tmp_path / "data", *args, env=env) as running:
            job = _launch_one(tmp_path / "data", running.port)
            argv = _cmdlines(running.proc.pid)
            assert argv and not [a for a in argv if password in a], argv
            assert job == "succeeded"
        log = (tmp_path / "data.log").read_text()
        assert password not in log and "postgres:***@" in log, log
    finally:
        drop()


def _launch_one(data: Path, port: int) -> str:
    """A job run through the server (its launch spawns the workload's processes)."""
    url = f"http://127.0.0.1:{port}"
    token = (data / "admin-token").read_text().strip()
    auth = {"Authorization": f"Bearer {token}"}
    job = web.post(url + "/v1/jobs", json={"run": "sleep 1"}, headers=auth).json()
    return wait_until(
        lambda: (s := web.get(f"{url}/v1/jobs/{job['id']}", headers=auth).json()["state"]) in ("succeeded", "failed") and s,
        60,
    )


def test_a_db_file_others_can_read_is_refused(tmp_path: Path) -> None:
    db_file = tmp_path / "db-url"
    db_file.write_text("postgresql+psycopg://u:pw@127.0.0.1/x\n")
    db_file.chmod(0o644)
    done = subprocess.run(
        cli_command("server", "--data-dir", str(tmp_path / "d"), "--db-file", str(db_file)),
        capture_output=True,
        text=True,
        timeout=60,
        env=WIDE,
    )
    assert done.returncode != 0 and "chmod 600" in done.stdout + done.stderr and "pw@" not in done.stdout + done.stderr

"""Fuzz the HTTP API from its own OpenAPI schema, as an admin and as a member, on SQLite
and on PostgreSQL: every schemathesis phase (examples, coverage, fuzzing, stateful), every
check, bounded in time. Fails when any response is a 5xx or has a status code the schema
does not document for its operation (the measure of issue 13, part 6).

    scripts/fuzz                                  both databases, both roles
    scripts/fuzz --db sqlite --as member          one run
    scripts/fuzz --db postgresql+psycopg://postgres@127.0.0.1:5432/test

Each database gets a server of its own on a throwaway data directory (PostgreSQL: a fresh
database, dropped afterwards). The server is the real app, control loop and billing thread,
but its ``local`` backend is the in-memory fake (``backends.memory``): the fuzzer may create
nodes, instances and jobs as admin, and none of them runs anything on this host. The member
belongs to a tenant of its own, so the tenant checks are fuzzed too. The member runs first:
the admin's run may cordon nodes, change prices and top up, which is fine on a throwaway
database, but would change what the member's run sees.

Per run it prints the operations and test cases schemathesis ran, the 5xx responses, the
undocumented status codes and the failures of the other checks (reported, not gating), and
writes schemathesis' own reports (ndjson, junit) under ``--report-dir``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
PG_DEFAULT = os.environ.get("SUANLI_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
#: the checks whose failures fail the run; the others are counted and printed
GATING = ("not_a_server_error", "status_code_conformance")


def serve(data_dir: Path, db_url: str | None, port: int) -> None:
    """The server under fuzzing: ``build``'s wiring with the in-memory backend as ``local``
    (it runs nothing), its loop and billing thread started, no port proxy."""
    import uvicorn

    from suanli.api.app import create_app
    from suanli.api.server import build
    from suanli.backends.memory import InMemoryBackend

    ctx, boot = build(data_dir, db_url, start_loop=False, runtime="process", interval_s=0.5, stop_grace_s=0.5)
    # the loop, its plane and the API share this dict: the fake replaces the local backend
    # everywhere before anything is launched
    ctx.backends["local"] = InMemoryBackend("local")
    assert ctx.loop is not None and ctx.billing is not None
    ctx.loop.start()
    ctx.billing.start()
    try:
        uvicorn.run(create_app(ctx), host="127.0.0.1", port=port, log_level="warning")
    finally:
        ctx.billing.stop()
        ctx.loop.stop()
        ctx.db.dispose()


# -- the runs ------------------------------------------------------------------------------


@dataclass
class Result:
    """What one schemathesis run found (counted from its ndjson events)."""

    label: str
    operations: int = 0
    test_cases: int = 0
    seconds: float = 0.0
    exit_code: int = 0
    server_errors: Counter[str] = field(default_factory=Counter)  #: "METHOD path -> status": times
    undocumented: Counter[str] = field(default_factory=Counter)
    other: Counter[str] = field(default_factory=Counter)  #: check name: failures
    #: why the counts cannot be trusted (a run cut off, no report): fails the run too
    broken: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.server_errors and not self.undocumented and not self.broken

    def lines(self) -> list[str]:
        head = (
            f"{self.label}: {self.operations} operations, {self.test_cases} test cases in {self.seconds:.0f} s: "
            f"{sum(self.server_errors.values())} 5xx ({len(self.server_errors)} unique), "
            f"{sum(self.undocumented.values())} undocumented status codes ({len(self.undocumented)} unique)"
        )
        out = [head] + [f"  BROKEN: {why}" for why in self.broken]
        out += [f"  5xx: {k} (x{n})" for k, n in sorted(self.server_errors.items())]
        out += [f"  undocumented: {k} (x{n})" for k, n in sorted(self.undocumented.items())]
        if self.other:
            out.append("  other checks (not gating): " + ", ".join(f"{k} {n}" for k, n in sorted(self.other.items())))
        return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def fresh_database(db: str) -> Iterator[str | None]:
    """``sqlite``: None (the server's default, in its data dir); a PostgreSQL URL: a new
    database next to the one it names, dropped afterwards."""
    if db == "sqlite":
        yield None
        return
    from sqlalchemy import create_engine, text

    name = f"suanli_fuzz_{uuid.uuid4().hex[:8]}"
    admin = create_engine(db, isolation_level="AUTOCOMMIT")
    with admin.connect() as c:
        c.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield db.rsplit("/", 1)[0] + "/" + name
    finally:
        with admin.connect() as c:
            c.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextlib.contextmanager
def server(db_url: str | None, workdir: Path, report_dir: str) -> Iterator[tuple[str, str]]:
    """A fuzzing server on a free port: its URL and admin token."""
    workdir.mkdir(parents=True, exist_ok=True)
    data_dir = workdir / "data"
    port = free_port()
    cmd = [sys.executable, str(Path(__file__).resolve()), "serve", "--data-dir", str(data_dir), "--port", str(port)]
    if db_url:
        cmd += ["--db-url", db_url]
    log = open(workdir / "server.log", "wb")
    env = {k: v for k, v in os.environ.items() if k not in ("SUANLI_DATA_DIR", "SUANLI_RUNTIME")}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"the fuzzing server exited:\n{(workdir / 'server.log').read_text()[-3000:]}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(url + "/healthz", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("the fuzzing server did not answer /healthz within 120 s")
            time.sleep(0.2)
        yield url, (data_dir / "admin-token").read_text().strip()
    finally:
        proc.terminate()
        try:
            proc.wait(20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        with contextlib.suppress(OSError):  # kept with the reports: a 5xx's traceback is in it
            shutil.copyfile(workdir / "server.log", Path(report_dir) / f"server-{workdir.name}.log")


def default_databases() -> list[str]:
    """SQLite, and the test PostgreSQL server where it answers. Unreachable, it is skipped
    with a line that says so, as the PostgreSQL tests skip, unless ``SUANLI_FUZZ_PG=require``
    (a PostgreSQL URL given with ``--db`` is always required)."""
    from sqlalchemy import create_engine, text

    try:
        engine = create_engine(PG_DEFAULT, connect_args={"connect_timeout": 3})
        with engine.connect() as c:
            c.execute(text("SELECT 1"))
        engine.dispose()
        return ["sqlite", PG_DEFAULT]
    except Exception as exc:
        if os.environ.get("SUANLI_FUZZ_PG") == "require":
            raise SystemExit(
                f"fuzz: PostgreSQL at {PG_DEFAULT} unreachable ({type(exc).__name__}) and SUANLI_FUZZ_PG=require"
            ) from None
        print(f"fuzz: PostgreSQL at {PG_DEFAULT} unreachable ({type(exc).__name__}): SQLite only", flush=True)
        return ["sqlite"]


def member_token(url: str, admin: str) -> str:
    """A member of a tenant of its own (not the operator's): the view of a stranger renting."""
    h = {"Authorization": f"Bearer {admin}"}
    httpx.post(url + "/v1/tenants", json={"name": "fuzz-tenant"}, headers=h, timeout=30).raise_for_status()
    r = httpx.post(
        url + "/v1/users", json={"name": "fuzz-member", "role": "member", "tenant": "fuzz-tenant"}, headers=h, timeout=30
    )
    r.raise_for_status()
    return str(r.json()["token"])


def schemathesis(url: str, token: str, label: str, args: argparse.Namespace) -> Result:
    """One bounded schemathesis run; counts from its ndjson report."""
    report = Path(args.report_dir) / label.replace(" ", "-").replace("/", "_")
    shutil.rmtree(report, ignore_errors=True)
    report.mkdir(parents=True)
    cmd = [
        str(Path(sys.executable).parent / "schemathesis"),
        "run",
        f"{url}/openapi.json",
        "--phases=examples,coverage,fuzzing,stateful",
        "--checks=all",
        f"--max-examples={args.max_examples}",
        f"--workers={args.workers}",
        f"--seed={args.seed}",
        "--continue-on-failure",
        "--no-shrink",
        "--suppress-health-check=all",
        "--generation-database=none",
        f"--request-timeout={args.request_timeout}",
        "--report=ndjson,junit",
        f"--report-dir={report}",
        "--no-color",
        "--header",
        f"Authorization: Bearer {token}",
    ]
    if args.max_time:
        cmd.append(f"--max-time={args.max_time}")
    started = time.monotonic()
    with open(report / "output.txt", "wb") as out:
        try:
            rc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT, timeout=args.timeout, cwd=report).returncode
        except subprocess.TimeoutExpired:
            rc = 124
    res = Result(label, seconds=time.monotonic() - started, exit_code=rc)
    events = report / "events.ndjson"
    if not events.exists():
        found = list(report.glob("*.ndjson"))
        events = found[0] if found else events
    count_events(events, res)
    if rc == 124:
        res.broken.append(f"schemathesis ran past --timeout {args.timeout:.0f} s and was stopped: its counts are partial")
    return res


def count_events(path: Path, res: Result) -> None:
    """Operations, test cases and failures by check from schemathesis' ndjson events."""
    if not path.exists():
        res.broken.append(f"no report at {path}: see output.txt next to it")
        return
    operations: set[str] = set()
    seen: set[tuple[str, str]] = set()  #: (case id, check): a scenario's events may repeat a case
    for line in path.read_text().splitlines():
        try:
            event = json.loads(line)
        except json.JSONDecodeError:
            continue
        walk(event, res, operations, seen)
    res.operations = len(operations)


def walk(event: object, res: Result, operations: set[str], seen: set[tuple[str, str]]) -> None:
    """Each ``ScenarioFinished`` event names its operation and holds its recorder: the
    test cases it sent and each check's outcome with the response."""
    if not isinstance(event, dict):
        return
    for kind, body in event.items():
        if kind != "ScenarioFinished" or not isinstance(body, dict):
            continue
        recorder = body.get("recorder") or {}
        label = recorder.get("label") or ""
        if label and not label.startswith("Stateful"):
            operations.add(label)
        cases = recorder.get("cases") or {}
        res.test_cases += len(cases)
        interactions = recorder.get("interactions") or {}
        for case_id, checks in (recorder.get("checks") or {}).items():
            case = (cases.get(case_id) or {}).get("value") or {}
            where = f"{case.get('method', '?')} {case.get('path', label)}"
            response = (interactions.get(case_id) or {}).get("response") or {}
            status = response.get("status_code", "?")
            for check in checks:
                if str(check.get("status", "")).lower() != "failure" or (case_id, check.get("name")) in seen:
                    continue
                seen.add((case_id, check.get("name")))
                name = check.get("name", "?")
                if name == "not_a_server_error":
                    res.server_errors[f"{where} -> {status}"] += 1
                elif name == "status_code_conformance":
                    res.undocumented[f"{where} -> {status}"] += 1
                else:
                    res.other[name] += 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command")
    s = sub.add_parser("serve", help="(internal) the server under fuzzing")
    s.add_argument("--data-dir", type=Path, required=True)
    s.add_argument("--db-url")
    s.add_argument("--port", type=int, required=True)
    ap.add_argument(
        "--db",
        action="append",
        help=f"sqlite, or a PostgreSQL URL (a fresh database is made beside it) [default: sqlite and {PG_DEFAULT}]",
    )
    ap.add_argument("--as", dest="roles", action="append", choices=["member", "admin"], help="[default: member, then admin]")
    ap.add_argument("--max-examples", type=int, default=10, help="fuzzing test cases per operation [default: 10]")
    ap.add_argument(
        "--max-time",
        type=int,
        default=0,
        help="schemathesis' --max-time: fuzz and stateful phases REPEAT until it is spent (0: off, --max-examples bounds) [default: 0]",
    )
    ap.add_argument(
        "--timeout",
        type=float,
        default=600,
        help=(
            "wall-clock guard of each schemathesis run, s; past it the run fails. A guard against a hung "
            "run, not a speed target (--max-examples bounds the work): a run takes 80-95 s on a quiet "
            "2-core machine and was seen at 180 s on a loaded one [default: 600]"
        ),
    )
    ap.add_argument("--request-timeout", type=float, default=20)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=13, help="Hypothesis' seed: the same cases each run [default: 13]")
    ap.add_argument("--report-dir", default=str(Path(tempfile.gettempdir()) / "suanli-fuzz"))
    args = ap.parse_args()
    if args.command == "serve":
        serve(args.data_dir, args.db_url, args.port)
        return 0
    results: list[Result] = []
    started = time.monotonic()
    for db in args.db or default_databases():
        db_name = "sqlite" if db == "sqlite" else "postgresql"
        with tempfile.TemporaryDirectory(prefix="suanli-fuzz-") as tmp, fresh_database(db) as url:
            Path(args.report_dir).mkdir(parents=True, exist_ok=True)
            with server(url, Path(tmp) / db_name, args.report_dir) as (base, admin):
                tokens = {"admin": admin, "member": member_token(base, admin)}
                for role in args.roles or ["member", "admin"]:
                    res = schemathesis(base, tokens[role], f"{db_name} {role}", args)
                    print("\n".join(res.lines()), flush=True)
                    results.append(res)
    bad = [r.label for r in results if not r.ok]
    print(
        f"fuzz: {len(results)} runs in {time.monotonic() - started:.0f} s; "
        + (f"FAILED: {', '.join(bad)}" if bad else "0 5xx, 0 undocumented status codes")
    )
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

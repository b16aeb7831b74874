"""The fixed CPU costs an in-process server puts on every test that builds one (issue 11:
the suite is CPU-bound on 2 cores, and hundreds of its tests each build a server).

    python bench/server_costs.py [--servers 10] [--ticks 200]

Per server, CPU time of this process (``time.process_time``, every thread):

- ``build``: ``api.server.build`` on a migrated copy of the schema, as the tests do;
- ``idle tick``: one pass of the control loop with nothing to do (the tests' loops tick
  every 0.25 s for as long as a test runs);
- ``first requests``: eight reads on a new app, against the same eight again on that app
  (the baseline, same run): the difference is what a new app pays once (route set-up).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.sqlite_helpers
os.environ.setdefault("SUANLI_RUNTIME", "process")

from fastapi.testclient import TestClient  # noqa: E402

from suanli.api.app import create_app  # noqa: E402
from suanli.api.server import build  # noqa: E402
from tests.sqlite_helpers import migrated_sqlite_url  # noqa: E402

READS = ["/v1/me", "/v1/instances", "/v1/jobs", "/v1/gpus", "/v1/nodes", "/v1/events", "/v1/billing/prices", "/v1/images"]


def cpu_ms(work) -> float:  # type: ignore[no-untyped-def]
    t0 = time.process_time()
    work()
    return (time.process_time() - t0) * 1000


def one_server(ticks: int) -> dict[str, float]:
    data = Path(tempfile.mkdtemp(prefix="suanli-costs-")) / "data"
    data.mkdir()
    url = migrated_sqlite_url(data / "suanli.db")
    built: list = []
    out = {"build": cpu_ms(lambda: built.append(build(data, url, start_loop=False)))}
    ctx, boot = built[0]
    assert ctx.loop is not None
    for _ in range(10):  # warm: the first passes compile the loop's statements
        ctx.loop.tick()
    out["idle tick"] = cpu_ms(lambda: [ctx.loop.tick() for _ in range(ticks)]) / ticks
    with TestClient(create_app(ctx)) as http:
        headers = {"Authorization": f"Bearer {boot.admin_token}"}

        def reads() -> None:
            for path in READS:
                assert http.get(path, headers=headers).status_code == 200, path

        out["first requests"] = cpu_ms(reads)
        out["same requests again"] = cpu_ms(reads)
    ctx.db.dispose()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--servers", type=int, default=10)
    ap.add_argument("--ticks", type=int, default=200)
    args = ap.parse_args()
    one_server(10)  # the process's first server: imports, the template database, caches
    runs = [one_server(args.ticks) for _ in range(args.servers)]
    print(f"{args.servers} servers after a first one, CPU ms (median, min-max), load {os.getloadavg()[0]:.1f}")
    for key in runs[0]:
        values = [r[key] for r in runs]
        print(f"  {key:22} {statistics.median(values):8.2f}  ({min(values):.2f}-{max(values):.2f})")
    first = statistics.median(r["first requests"] for r in runs)
    again = statistics.median(r["same requests again"] for r in runs)
    print(f"  first requests / the same again: {first / again:.2f}x")
    tick = statistics.median(r["idle tick"] for r in runs)
    print(f"  an idle loop at 0.25 s costs {tick / 250 * 100:.1f} % of a core")


if __name__ == "__main__":
    main()

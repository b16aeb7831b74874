"""What the control loop's verify-run phase (``verify_jobs.collect``, phase 2b) costs a tick
when no run is due: one read. Baseline in the same run: the admit phase's
``sizing.inventory_fingerprint`` read, which every tick already makes.

    python bench/verify_collect_cost.py [--calls 500]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path


def timed(fn: Callable[[], object], calls: int) -> list[float]:
    for _ in range(20):
        fn()
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return sorted(out)


def main() -> None:
    from suanli.control import sizing, verify_jobs
    from suanli.control.plane import Plane
    from suanli.control.secrets import Keyring
    from suanli.db.session import Database

    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=500)
    args = ap.parse_args()
    d = Path(tempfile.mkdtemp(prefix="suanli-bench-"))
    db = Database(f"sqlite:///{d}/suanli.db")
    db.migrate()
    plane = Plane(db, {}, d, keyring=Keyring.load(d))

    def fingerprint() -> object:
        with db.sessions() as s:
            return sizing.inventory_fingerprint(s)

    base = timed(fingerprint, args.calls)
    new = timed(lambda: verify_jobs.collect(plane), args.calls)
    p10 = args.calls // 10
    for label, ts in (("inventory_fingerprint (baseline)", base), ("verify_jobs.collect", new)):
        print(f"{label}: p10 {ts[p10] * 1e6:.0f} us, median {statistics.median(ts) * 1e6:.0f} us")
    print(
        f"ratio collect / baseline: p10 {new[p10] / base[p10]:.2f}, median {statistics.median(new) / statistics.median(base):.2f}"
    )


if __name__ == "__main__":
    main()

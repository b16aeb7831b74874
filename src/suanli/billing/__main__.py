"""Operator entry point that runs next to the database (cron, systemd timer, tests):

    python -m suanli.billing rate --db URL [--cutoff-ms MS] [--batch N]

Prints the run's result as one JSON line. Safe to run concurrently with the server
and with itself, and to kill at any moment: re-running posts what is missing, once.
It rates and posts only: budgets and the hard cap are the control plane's (the
server's billing worker, ``suanli.control.billing_worker``, applies them after its
runs; ``suanli rate`` rates and applies them at once).
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from suanli.billing import rater
from suanli.db.session import Database


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m suanli.billing")
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("rate", help="one idempotent rating run")
    r.add_argument("--db", required=True, help="SQLAlchemy URL of the Suanli database")
    r.add_argument(
        "--cutoff-ms",
        type=int,
        default=None,
        help="rate everything final at this instant (default: ended work up to now, running work's periods closed 60 s ago)",
    )
    r.add_argument("--batch", type=int, default=50_000, help="records per transaction")
    r.add_argument("--pause-after-batch", type=float, default=0.0, help="seconds to sleep after each batch (tests)")
    args = ap.parse_args(argv)
    db = Database(args.db)
    try:
        db.migrate()
        pause = (lambda _b: time.sleep(args.pause_after_batch)) if args.pause_after_batch else None
        res = rater.run(db, cutoff_ms=args.cutoff_ms, batch=args.batch, after_batch=pause)
    finally:
        db.dispose()
    print(
        json.dumps(
            {
                "run_id": res.run_id,
                "cutoff_ms": res.cutoff_ms,
                "settled_ms": res.settled_ms,
                "records": res.records,
                "inserted": res.posted.inserted,
                "skipped": res.posted.skipped,
                "batches": res.posted.batches,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""``python -m suanli.api``: the server without the rest of the CLI (same as
``suanli server``; handy for process supervisors and tests)."""

from __future__ import annotations

import argparse
from pathlib import Path

from suanli.api.server import DEFAULT_PORT, default_data_dir, serve


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m suanli.api", description="Run the Suanli API server.")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=DEFAULT_PORT)
    p.add_argument("--data-dir", type=Path, default=None)
    p.add_argument("--db", default=None)
    p.add_argument("--no-audit", action="store_true", help="do not record state changes (only to measure the audit's cost)")
    p.add_argument("--workers", type=int, default=None, help="API worker processes [default: one per core]")
    a = p.parse_args()
    if a.workers is not None and a.workers < 1:
        p.error("--workers must be at least 1")
    serve(a.host, a.port, a.data_dir or default_data_dir(), a.db, audit=not a.no_audit, workers=a.workers)


if __name__ == "__main__":
    main()

"""Screenshots of the console's dashboard for docs/console.md, in English and Chinese, for
an operator and for a renter: a real server in this process (demo inventory, process
runtime), some running work, a failed job, and a week of rated usage written into its
database so the charts have something to show.

    .venv/bin/python scripts/console_screenshots.py [--out docs/img]

Needs Chromium (scripts/browser) and Playwright (the dev extra).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("SUANLI_RUNTIME", "process")
os.environ.setdefault("SUANLI_ALLOW_PROCESS_RUNTIME", "1")

from playwright.sync_api import sync_playwright  # noqa: E402
from sqlalchemy import select  # noqa: E402

from suanli.billing.tables import Usage  # noqa: E402
from suanli.db.models import Tenant  # noqa: E402
from tests.console.conftest import CHROMIUM_ARGS  # noqa: E402
from tests.control.control_helpers import LiveServer, wait_until  # noqa: E402

DAY_MS = 86_400_000


def _history(srv: LiveServer, tenant: str, per_day: list[int]) -> None:
    """Rated usage of ``per_day[i]`` micro-units ``len - i`` days ago."""
    assert srv.ctx is not None
    now = int(time.time() * 1000)
    with srv.ctx.db.transaction() as s:
        tid = s.scalar(select(Tenant.id).where(Tenant.name == tenant))
        for i, amount in enumerate(per_day):
            ms = now - (len(per_day) - i) * DAY_MS
            s.add(
                Usage(
                    kind="transfer", source_id=900_000 + i + 100 * (tid or 0), period_ms=ms, tenant_id=tid, workload_kind="instance",
                    workload_id=0, gpu_model="", plan="on-demand", start_ms=ms, end_ms=ms + 6000, quantity=1, billed_seconds=0,
                    unit_price=amount, amount=amount, currency="CNY", price_version=1, run_id="screenshots",
                )
            )  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="docs/img", help="where the PNG files go")
    out = Path(parser.parse_args().out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="suanli-shots-"))
    srv = LiveServer(tmp / "data").start()
    try:
        c = srv.client()
        c.request("POST", "/v1/tenants", json={"name": "acme"})
        c.topup("acme", "500")
        member = c.request("POST", "/v1/users", json={"name": "renter", "tenant": "acme"})["token"]
        mine = srv.client().__class__(srv.url, member)
        mine.create_instance(name="notebook", gpu_model="rtx4090", gpu_milli=500)
        mine.launch({"name": "train-7b", "resources": {"accelerators": "H100:2"}, "run": "sleep 600"})
        mine.launch({"name": "bad-config", "resources": {"accelerators": "A100-80G:1"}, "run": "exit 3"})
        c.create_instance(name="big-box", gpu_model="h100", gpu_count=4)
        wait_until(lambda: len([w for w in c.instances() + c.jobs() if w["state"] in ("running", "failed")]) >= 4, 30)
        _history(srv, "acme", [12_400_000, 30_150_000, 8_000_000, 41_700_000, 25_300_000, 19_900_000, 33_600_000])
        admin = c.request("GET", "/v1/me")
        assert srv.ctx is not None
        with srv.ctx.db.sessions() as s:
            own = s.scalar(select(Tenant.name).where(Tenant.id == admin["tenant_id"]))
        _history(srv, own or "", [50_000_000, 64_000_000, 58_500_000, 71_000_000, 66_200_000, 80_100_000, 75_000_000])
        time.sleep(3)  # the alerts thread's pass over the failed job
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=shutil.which("chromium") or "chromium", args=CHROMIUM_ARGS)
            for who, token in (("operator", srv.token), ("renter", member)):
                for lang in ("en", "zh-CN"):
                    context = browser.new_context(base_url=srv.url, locale=lang, viewport={"width": 1280, "height": 900})
                    context.add_init_script("localStorage.setItem('suanli.dashboard_days', '7')")
                    page = context.new_page()
                    page.goto("/")
                    page.fill("#login input[name=token]", token)
                    page.click("#login button")
                    page.wait_for_selector("#spend-chart")
                    page.wait_for_timeout(1500)
                    path = out / f"dashboard-{who}-{lang}.png"
                    page.screenshot(path=str(path), full_page=True)
                    print(path)
                    context.close()
            browser.close()
    finally:
        srv.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()

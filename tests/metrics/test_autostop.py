"""Idle auto-stop on a real server (host-process runtime, the metrics thread running):
windows asked, defaulted and refused; an idle instance noticed, then stopped with its disk
kept and its allocation (billing) ended; activity withdraws the notice. The container
suite (``tests/containers/test_container_autostop.py``) proves busy and SSH-held
instances are never stopped."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import select

from suanli.control.autostop import AutostopSettings, check
from suanli.control.launcher import disk_dir
from suanli.control.metrics import MetricsSettings, WorkloadUsage
from suanli.db.models import Allocation, Tenant
from tests.control.control_helpers import Server, start_server, wait_state
from tests.event_helpers import events_text
from tests.metrics.autostop_helpers import Timeline
from tests.sqlite_helpers import migrated_sqlite_url


@pytest.fixture
def asrv(tmp_path: Path) -> Iterator[Server]:
    (tmp_path / "data").mkdir()
    srv = start_server(
        tmp_path / "data",
        migrated_sqlite_url(tmp_path / "data" / "suanli.db"),
        runtime="process",
        metrics=MetricsSettings(interval_s=1.0),
        autostop=AutostopSettings(min_s=2, notice_s=1.0),
    )
    try:
        yield srv
    finally:
        srv.close()


def _create(srv: Server, expect: int = 201, **body: object) -> dict:
    r = srv.post("/v1/instances", {"gpu_model": "h100", "gpu_count": 1, "disk_gib": 1, **body})
    assert r.status_code == expect, r.text
    return r.json()


def test_windows_asked_defaulted_and_refused(asrv: Server) -> None:
    assert _create(asrv, autostop_s=1800)["autostop_s"] == 1800
    assert _create(asrv)["autostop_s"] is None  # no tenant or platform default: never
    asrv.ctx.autostop.default_s = 3600  # the platform's --autostop-default 1h
    assert _create(asrv)["autostop_s"] == 3600
    before = len(asrv.get("/v1/instances"))
    refused = _create(asrv, expect=422, autostop_s=1)  # below the minimum (2 s here, 5 min by default)
    assert "shorter than the minimum idle window" in str(refused), refused
    _create(asrv, expect=422, autostop_s=-5)
    assert len(asrv.get("/v1/instances")) == before  # nothing created
    with asrv.ctx.db.transaction() as s:
        s.scalars(select(Tenant)).first().autostop_s = 7200  # type: ignore[union-attr]
    assert _create(asrv)["autostop_s"] == 7200  # the tenant's default
    assert _create(asrv, autostop_s=0)["autostop_s"] is None  # 0: off, over the tenant's default


def test_server_options_parse_the_default_and_the_minimum() -> None:
    import typer

    from suanli.cli.server import _autostop

    got = _autostop("2h", "5m")
    assert (got.default_s, got.min_s) == (7200, 300), got
    assert _autostop(None, "90s").default_s is None
    with pytest.raises(typer.BadParameter, match="below the minimum"):
        _autostop("1m", "5m")
    with pytest.raises(typer.BadParameter, match="not a duration"):
        _autostop(None, "soon")


def test_an_idle_instance_is_noticed_then_stopped_with_its_disk_kept_and_billing_ended(asrv: Server) -> None:
    window = 4
    inst = wait_state(asrv, "instance", _create(asrv, autostop_s=window)["id"], ("running",), 30)
    timeline = Timeline.record(asrv)
    assert asrv.ctx.metrics is not None
    asrv.ctx.metrics.start()
    stopped = wait_state(asrv, "instance", inst["id"], ("stopped",), window + 20)
    timeline.assert_stopped_in_time(asrv, inst["id"], window, asrv.ctx.autostop.notice_s)
    events = asrv.get(f"/v1/events?kind=instance&object_id={inst['id']}")
    states = [e["to_state"] for e in events]
    assert states[-3:] == ["noticed", "stopping", "stopped"], events_text(events)
    assert "auto-stop after 4s" in events[-3]["message"] and "disk is kept" in events[-1]["message"], events_text(events)
    assert stopped["desired"] == "stopped" and stopped["allocations"] == [], stopped
    with asrv.ctx.db.sessions() as s:
        open_allocs = s.scalars(select(Allocation).where(Allocation.instance_id == inst["id"], Allocation.ended_at.is_(None)))
        assert list(open_allocs) == []  # billing stops with the allocation
    assert disk_dir(asrv.data_dir, inst["id"]).is_dir(), "its disk is kept"


def test_activity_during_the_notice_withdraws_it(asrv: Server) -> None:
    inst = wait_state(asrv, "instance", _create(asrv, autostop_s=4)["id"], ("running",), 30)
    plane, rules = asrv.ctx.loop.plane, asrv.ctx.autostop  # type: ignore[union-attr]

    def usage(cpu: float) -> list[WorkloadUsage]:
        return [WorkloadUsage("instance", inst["id"], 1, time.time(), cpu, 10.0, None, None, None, 0, "")]

    assert check(plane, rules, usage(0.0), time.time() + 3.5) == [inst["id"]]  # idle 3.5 s of 4: noticed
    assert asrv.get(f"/v1/instances/{inst['id']}")["notice"].startswith("idle since"), asrv.get(f"/v1/instances/{inst['id']}")
    assert check(plane, rules, usage(80.0), time.time()) == []  # busy: notice withdrawn
    got = asrv.get(f"/v1/instances/{inst['id']}")
    assert got["notice"] is None and got["state"] == "running", got
    events = asrv.get(f"/v1/events?kind=instance&object_id={inst['id']}")
    assert "idle notice withdrawn: active again (CPU 80% of a core)" in events[-1]["message"], events_text(events)


def test_a_first_reading_is_no_judgment_however_long_the_instance_ran(asrv: Server) -> None:
    """The collector's first reading of an instance (its average since start: the metrics
    thread started late, or the worker restarted) is not a look over an interval: an instance
    running longer than its window is not noticed on it, only on an idle reading after."""
    inst = wait_state(asrv, "instance", _create(asrv, autostop_s=4)["id"], ("running",), 30)
    plane, rules = asrv.ctx.loop.plane, asrv.ctx.autostop  # type: ignore[union-attr]

    def usage(cpu: float, over_interval: bool) -> list[WorkloadUsage]:
        return [WorkloadUsage("instance", inst["id"], 1, time.time(), cpu, 10.0, None, None, None, 0, "", [], over_interval)]

    later = time.time() + 60  # long past its 4-s window
    assert check(plane, rules, usage(0.0, over_interval=False), later) == []
    assert asrv.get(f"/v1/instances/{inst['id']}")["notice"] is None
    assert check(plane, rules, usage(0.0, over_interval=True), later + 1) == [inst["id"]]


def test_cli_create_takes_a_duration(asrv: Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from suanli.cli import app, remote

    monkeypatch.setattr(remote, "client_factory", lambda: asrv.client())
    monkeypatch.setenv("SUANLI_CONFIG", str(tmp_path / "config.json"))
    runner = CliRunner()
    ok = runner.invoke(app, ["instances", "create", "--gpu", "h100", "--disk", "1", "--autostop", "30m", "--json"])
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.output)["autostop_s"] == 1800, ok.output
    before = len(asrv.get("/v1/instances"))
    bad = runner.invoke(app, ["instances", "create", "--gpu", "h100", "--disk", "1", "--autostop", "soon"])
    assert bad.exit_code == 2 and "not a duration" in bad.output, bad.output
    assert len(asrv.get("/v1/instances")) == before
    shown = runner.invoke(app, ["instances", "show", str(json.loads(ok.output)["id"])])
    assert "autostop: after 30m idle" in shown.output, shown.output

"""Migration of GPU shares (``control.migrate``) in the real control loop against the
fake backend, step by step: the rig of ``test_loop_fake.py``, two one-GPU nodes each
holding a share, so a one-GPU request fits nowhere."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event

from suanli.billing import store as billing_store
from suanli.control import accounts, instances, jobs
from suanli.control.auth import Principal
from suanli.control.launcher import task_key
from suanli.control.plane import MigrationSettings
from suanli.control.task import Task
from suanli.db.models import Job
from tests.control.test_loop_fake import ADMIN, Rig, make_rig, only

#: ``fragmented(share)``: a rig and its two shares (the fixture below)
Fragmented = Callable[[dict[str, Any]], tuple[Rig, dict[str, int]]]


@pytest.fixture
def fragmented(tmp_path: Path) -> Iterator[Fragmented]:
    """``fragmented(share)``: a rig of two one-GPU nodes, each holding one running share of
    200 milli (``share``: the shares' task fields), so 800 milli is free on each GPU and
    no whole GPU is; and the shares by name. Shares of 800 placed first put them on
    different GPUs; they then end."""
    rigs: list[Rig] = []

    def make(share: dict[str, Any]) -> tuple[Rig, dict[str, int]]:
        rig = make_rig(tmp_path, ("m1", "m2"), gpus=1)
        rigs.append(rig)
        big = [rig.submit("H100:1", resources={"gpu_milli": 800}) for _ in range(2)]
        rig.tick()
        small = {}
        for name in ("a", "b"):  # one at a time: the second fits only beside the other big share
            small[name] = rig.submit("H100:1", **{**share, "resources": {"gpu_milli": 200, **share.get("resources", {})}})
            rig.tick()
        for j in big:
            rig.fake.exit(task_key("job", j), 0)
        rig.tick()
        assert sorted(rig.nodes_of("job", j)[0] for j in small.values()) == ["m1", "m2"]
        return rig, small

    yield make
    for rig in rigs:
        rig.db.dispose()


@pytest.mark.parametrize("planner", ["direct", "repack"])
def test_whole_gpu_work_kept_waiting_by_scattered_shares_gets_one_moved(fragmented: Fragmented, planner: str) -> None:
    """A one-GPU job fits nowhere: each GPU holds a 200-milli share. One share is noticed
    (a migration, with the reclaim notice), the request waits for it without planning
    again, and when the notice runs out the share is requeued from its checkpoint and
    placed after the request: the request gets the GPU it left, the share the other."""
    rig, small = fragmented({"checkpoint_dir": "ckpt"})
    rig.loop.plane.migration = MigrationSettings(moves=2, planner=planner)
    whole = rig.submit("H100:1")
    rig.tick()
    assert rig.job(whole).state == "queued"
    [(moved, left)] = [(j, rig.nodes_of("job", j)[0]) for j in small.values() if rig.job(j).notice_for]
    assert rig.job(moved).notice_for == f"job-{whole}"
    [(_, message)] = [e for e in rig.events("job", moved) if e[0] == "noticed"]
    assert message.startswith(f"migration for job-{whole}: its share of {left} GPU 0 moves"), message
    other = ({"m1", "m2"} - {left}).pop()
    assert rig.job(moved).moved_to == [other, 0]  # where the plan put it
    rig.tick(2)
    assert len(rig.fake.notices) == 1 and rig.job(whole).state == "queued"  # it waits for its notice
    due = datetime.fromtimestamp(rig.fake.notices[0].deadline, tz=UTC).strftime("%H:%M:%S UTC")
    assert rig.loop.stats.unplaced[("job", whole)].text() == (
        f"waiting for capacity (gpu; 1 running workload noticed to make room, due {due})"
    )
    rig.wait_out_notice(task_key("job", moved))
    rig.tick()
    assert rig.job(whole).state == "running" and rig.nodes_of("job", whole) == [left]
    assert rig.job(moved).state == "running" and rig.nodes_of("job", moved) == [other]
    assert rig.job(moved).evicted_for is None and rig.job(moved).moved_to is None
    relaunch = [t for t in rig.fake.submitted if t.key == task_key("job", moved)][-1]
    assert relaunch.env["SUANLI_RESUME_FROM"].endswith("ckpt"), relaunch.env
    assert ("queued", f"requeued; resumes from {relaunch.env['SUANLI_RESUME_FROM']}") in rig.events("job", moved)
    assert rig.loop.plane.stats.migrations == 1
    rig.assert_consistent()


@pytest.mark.parametrize("case", ["off", "no checkpoint", "spot request", "instances"])
def test_nothing_moves_that_cannot_resume_or_for_lower_class_work(fragmented: Fragmented, case: str) -> None:
    """Migration is off unless asked for; a job without a checkpoint_dir would lose its
    work, an instance is a renter's machine, and on-demand work does not move for spot."""
    share: dict[str, Any] = {} if case == "no checkpoint" else {"checkpoint_dir": "ckpt"}
    rig, small = fragmented(share)
    if case == "instances":  # shares of instances in the jobs' places
        for j in small.values():
            rig.fake.exit(task_key("job", j), 0)
        rig.tick()
        ask = instances.InstanceRequest("box", "H100", 1, 200, None, None, None, 10, "on-demand")
        for _ in small:
            instances.create(rig.db, ADMIN, ask)
            rig.tick()
    rig.loop.plane.migration = MigrationSettings(moves=0 if case == "off" else 2)
    whole = rig.submit("H100:1", resources={"priority": "spot"} if case == "spot request" else {})
    rig.tick(2)
    assert rig.job(whole).state == "queued" and rig.fake.notices == [] and rig.loop.plane.stats.migrations == 0
    rig.assert_consistent()


def test_work_evicted_for_waiting_work_is_placed_right_behind_it() -> None:
    from suanli.control.scheduling import Waiting, behind_beneficiaries
    from suanli.scheduler import Request

    def w(i: int, after: str | None = None) -> Waiting:
        return Waiting("job", i, Request(gpu_count=1), 1, datetime(2026, 1, 1), after)

    order = [w(1, "job-4"), w(2), w(3, "job-1"), w(4), w(5, "job-9"), w(6, "job-7"), w(7, "job-6")]
    # 1 behind 4 and 3 behind 1; 5's beneficiary does not wait; 6 and 7 are a cycle
    assert [x.id for x in behind_beneficiaries(order)] == [2, 4, 1, 3, 5, 6, 7]


def test_migration_settings_name_the_simulators_planners_and_refuse_others() -> None:
    from suanli.control.plane import PLANNER_NAMES
    from suanli.scheduler.repack import PLANNERS

    assert set(PLANNER_NAMES) == set(PLANNERS)
    with pytest.raises(ValueError, match="unknown migration planner 'chains'; choose direct or repack"):
        MigrationSettings(moves=2, planner="chains")
    with pytest.raises(ValueError, match="moves and retry_s must be >= 0"):
        MigrationSettings(moves=-1)


def test_a_migration_its_request_no_longer_needs_is_withdrawn(fragmented: Fragmented) -> None:
    """The other share ends during the notice: the request runs on the GPU that freed, and
    the noticed share stays where it is (a spot reclaim's notice is final; a move that
    buys nothing is not made)."""
    rig, small = fragmented({"checkpoint_dir": "ckpt"})
    rig.loop.plane.migration = MigrationSettings(moves=2)
    whole = rig.submit("H100:1")
    rig.tick()
    [moved] = [j for j in small.values() if rig.job(j).notice_for]
    [ends] = [j for j in small.values() if j != moved]
    where = rig.nodes_of("job", moved)
    rig.fake.exit(task_key("job", ends), 0)
    rig.tick()
    assert rig.job(whole).state == "running" and rig.nodes_of("job", whole) == [({"m1", "m2"} - set(where)).pop()]
    rig.wait_out_notice(task_key("job", moved))
    rig.tick()
    assert rig.job(moved).state == "running" and rig.job(moved).notice_for is None and rig.nodes_of("job", moved) == where
    assert rig.events("job", moved)[-1] == ("running", f"migration withdrawn: job-{whole} no longer waits")
    assert task_key("job", moved) not in dict(rig.fake.stopped)
    rig.assert_consistent()


@pytest.mark.parametrize("room", ["fits", "taken"])
def test_a_moved_share_goes_where_the_plan_put_it_while_that_gpu_takes_it(tmp_path: Path, room: str) -> None:
    """A requeued share with a plan's destination (``Job.moved_to``) is placed there, not
    where the policy would put it (the GPU of the same share placed a moment before);
    when that GPU no longer takes it, the policy places it. Either way the plan is spent."""
    rig = make_rig(tmp_path, ("m1", "m2"), gpus=1)
    try:
        share = {"resources": {"gpu_milli": 200}, "checkpoint_dir": "ckpt"}
        probe = rig.submit("H100:1", **share)
        rig.tick()
        [policy_pick] = rig.nodes_of("job", probe)
        rig.fake.exit(task_key("job", probe), 0)
        rig.tick()
        planned = ({"m1", "m2"} - {policy_pick}).pop()
        if room == "taken":  # the planned GPU filled meanwhile
            only(rig, planned)
            rig.submit("H100:1")
            rig.tick()
            only(rig, "m1", "m2")
        moved = rig.submit("H100:1", **share)
        with rig.db.transaction() as s:
            s.get(Job, moved).moved_to = [planned, 0]
        rig.tick()
        assert rig.job(moved).state == "running" and rig.job(moved).moved_to is None
        assert rig.nodes_of("job", moved) == [planned if room == "fits" else policy_pick]
        rig.assert_consistent()
    finally:
        rig.db.dispose()


@pytest.mark.parametrize("planner", ["direct", "repack"])
def test_a_gang_kept_waiting_by_scattered_shares_gets_a_node_of_its_own_per_member(tmp_path: Path, planner: str) -> None:
    """Three one-GPU nodes hold shares of 200, 200 and 500 milli: one GPU's worth. A gang
    of two one-GPU members needs two nodes cleared: two shares are noticed, and when their
    notices run out the gang runs on the two nodes they left and every share runs again."""
    rig = make_rig(tmp_path, ("m1", "m2", "m3"), gpus=1)
    try:
        shares = {}
        for where, milli in (("m1", 200), ("m2", 200), ("m3", 500)):
            only(rig, where)
            shares[where] = rig.submit("H100:1", resources={"gpu_milli": milli}, checkpoint_dir="ckpt")
            rig.tick()
        only(rig, "m1", "m2", "m3")
        rig.loop.plane.migration = MigrationSettings(moves=4, planner=planner)
        gang = rig.submit("H100:1", num_nodes=2)
        rig.tick()
        moved = [j for j in shares.values() if rig.job(j).notice_for == f"job-{gang}"]
        assert len(moved) == 2 and rig.job(gang).state == "queued"
        left = sorted(rig.nodes_of("job", j)[0] for j in moved)
        for j in moved:
            rig.wait_out_notice(task_key("job", j))
        rig.tick()
        assert rig.job(gang).state == "running" and sorted(rig.nodes_of("job", gang)) == left
        assert all(rig.job(j).state == "running" for j in shares.values())
        assert rig.loop.plane.stats.migrations == 2
        rig.assert_consistent()
    finally:
        rig.db.dispose()


def test_a_migration_for_a_request_billing_then_holds_is_withdrawn(fragmented: Fragmented) -> None:
    """The request's prepaid tenant runs out of funds during the notice: billing holds the
    request, so it would not take the GPU the move frees; the noticed share stays."""
    rig, small = fragmented({"checkpoint_dir": "ckpt"})
    rig.loop.plane.migration = MigrationSettings(moves=2)
    accounts.create_tenant(rig.db, ADMIN, "lab")
    billing_store.topup(rig.db, "lab", "100")
    user, _ = accounts.create_user(rig.db, ADMIN, "lab-user", "member", "lab")
    member = Principal(user_id=user.id, tenant_id=user.tenant_id, name=user.name, role="member")
    task = Task.model_validate({"resources": {"accelerators": "H100:1"}, "run": "train"})
    whole = jobs.submit(rig.db, member, task).id
    rig.tick()
    [moved] = [j for j in small.values() if rig.job(j).notice_for == f"job-{whole}"]
    billing_store.record_transfer(rig.db, "lab", "10000")  # ¥1,200 of transfer: lab's ¥100 is spent
    rig.tick()
    assert rig.job(moved).notice_for is None and rig.job(moved).notice_deadline is None
    [(state, message)] = rig.events("job", moved)[-1:]
    assert state == "running" and message.startswith(f"migration withdrawn: job-{whole} is held: "), message
    rig.wait_out_notice(task_key("job", moved))
    rig.tick()
    assert rig.job(moved).state == "running" and rig.job(whole).state == "queued"
    assert task_key("job", moved) not in dict(rig.fake.stopped)
    rig.assert_consistent()


def test_a_migration_plan_reads_the_shares_allocations_at_once(fragmented: Fragmented) -> None:
    """The phase's reads do not grow with the running shares: their allocations in one read
    (the snapshot reads them once more), not one per share."""
    rig, small = fragmented({"checkpoint_dir": "ckpt"})
    more = [rig.submit("H100:1", resources={"gpu_milli": 100}, checkpoint_dir="ckpt") for _ in range(4)]
    rig.tick()
    assert all(rig.job(j).state == "running" for j in more)
    rig.loop.plane.migration = MigrationSettings(moves=2)
    rig.submit("H100:1")
    work, _ = rig.loop.admit()
    statements: list[str] = []
    event.listen(rig.db.engine, "before_cursor_execute", lambda _c, _cur, sql, *_: statements.append(sql))
    assert rig.loop.migrator.migrate(work)
    assert len([sql for sql in statements if sql.startswith("SELECT") and " allocations" in sql]) == 2, statements
    rig.assert_consistent()

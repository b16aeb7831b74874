"""The real control loop on a real SQLite database against ``InMemoryBackend`` (a fake
backend: it runs nothing, records what it is asked and lets the test script outcomes).

Each test calls ``loop.tick()`` itself: no loop thread, no processes, no polling sleeps,
so a scenario is deterministic and takes milliseconds. Spot notices run on a
``ManualClock`` the test advances: a notice of ``NOTICE_S`` costs no waiting.
Every test ends by checking that no allocation is counted twice (``assert_consistent``).
"""

from __future__ import annotations

import atexit
import shutil
import signal
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, select, update

from suanli.api.server import build
from suanli.backends.base import Backend, BackendError, Handle, NodeHealth, NodeReport, TaskState
from suanli.backends.memory import InMemoryBackend
from suanli.billing import store as billing_store
from suanli.clock import ManualClock
from suanli.control import accounts, health, instances, jobs, nodes
from suanli.control.auth import Principal
from suanli.control.launcher import checkpoint_dir, task_key
from suanli.control.loop import ControlLoop
from suanli.control.notice import deliver_notice
from suanli.control.plane import ReclaimSettings
from suanli.control.task import Task
from suanli.db.models import Allocation, Event, Gpu, Instance, Job, Node
from suanli.db.session import Database
from suanli.inventory import Inventory, NodeDecl
from tests.control.control_helpers import wait_until

ADMIN = Principal(user_id=1, tenant_id=1, name="admin", role="admin")
#: The spot notice, in the loop's (manual) clock: nothing is slept.
NOTICE_S = 30.0
RECLAIM_GRACE_S = 1.5  # passed to the backend's stop; the fake does not wait it out


def make_loop(db: Database, backends: dict[str, Backend], data_dir: Path, clock: ManualClock) -> ControlLoop:
    """THE one place that builds the loop under test: every phase each tick (status
    polled and health synced every tick), notices on ``clock``, no heartbeat watch."""
    return ControlLoop(
        db,
        backends,
        data_dir,
        interval_s=0.05,
        stop_grace_s=1.0,
        poll_interval_s=0.0,
        reclaim=ReclaimSettings(notice_s=NOTICE_S, grace_s=RECLAIM_GRACE_S),
        health_interval_s=0.0,
        heartbeat_timeout_s=None,
        clock=clock,
    )


@dataclass
class Rig:
    loop: ControlLoop
    fake: InMemoryBackend
    clock: ManualClock

    @property
    def db(self) -> Database:
        return self.loop.db

    def tick(self, times: int = 1) -> None:
        for _ in range(times):
            self.loop.tick()

    def submit(self, accel: str = "H100:4", **task: Any) -> int:
        resources = {"accelerators": accel, **task.pop("resources", {})}
        task.setdefault("run", "train")
        return jobs.submit(self.db, ADMIN, Task.model_validate({"resources": resources, **task})).id

    def job(self, job_id: int) -> Job:
        with self.db.transaction() as s:
            return s.get(Job, job_id)  # type: ignore[return-value]

    def allocations_of(self, job_id: int) -> list[Allocation]:
        """Every allocation of job ``job_id`` (open or ended), by rank."""
        with self.db.transaction() as s:
            return list(s.scalars(select(Allocation).where(Allocation.job_id == job_id).order_by(Allocation.node_rank)))

    def instance(self, instance_id: int) -> Instance:
        with self.db.transaction() as s:
            return s.get(Instance, instance_id)  # type: ignore[return-value]

    def nodes_of(self, kind: str, wid: int) -> list[str]:
        """Node names of the row's open allocations, by rank."""
        col = Allocation.job_id if kind == "job" else Allocation.instance_id
        with self.db.transaction() as s:
            q = select(Node.name).join(Allocation, Allocation.node_id == Node.id)
            return list(s.scalars(q.where(col == wid, Allocation.ended_at.is_(None)).order_by(Allocation.node_rank)))

    def node_state(self, name: str) -> str:
        with self.db.transaction() as s:
            return s.scalar(select(Node.state).where(Node.name == name))  # type: ignore[return-value]

    def events(self, kind: str, object_id: int) -> list[tuple[str, str]]:
        with self.db.transaction() as s:
            q = select(Event).where(Event.kind == kind, Event.object_id == object_id).order_by(Event.id)
            return [(e.to_state, e.message) for e in s.scalars(q)]

    def node_events(self, name: str) -> list[tuple[str, str]]:
        with self.db.transaction() as s:
            node_id = s.scalar(select(Node.id).where(Node.name == name))
        return self.events("node", node_id)  # type: ignore[arg-type]

    def wait_out_notice(self, key: str) -> None:
        """Move the clock past the deadline delivered to task ``key``."""
        deadline = max(n.deadline for n in self.fake.notices if n.key == key)
        self.clock.set(max(self.clock.now(), deadline + 0.001))

    def assert_consistent(self) -> None:
        """No allocation counted twice or lost: every usage counter equals the sum of the
        open allocations, no GPU holds more than one GPU, and the backend runs exactly the
        tasks of the rows that are running."""
        with self.db.transaction() as s:
            open_allocs = list(s.scalars(select(Allocation).where(Allocation.ended_at.is_(None))))
            want: dict[tuple[int, int], int] = {}
            for a in open_allocs:
                for g in a.gpu_indices:
                    want[(a.node_id, int(g))] = want.get((a.node_id, int(g)), 0) + a.milli_per_gpu
            for g in s.scalars(select(Gpu)):
                assert g.used_milli == want.get((g.node_id, g.index), 0), (g.node_id, g.index, g.used_milli)
                assert g.used_milli <= 1000
            for n in s.scalars(select(Node)):
                mine = [a for a in open_allocs if a.node_id == n.id]
                assert n.cpu_used == sum(a.cpu_milli for a in mine), n.name
                assert n.mem_used == sum(a.memory_mib for a in mine), n.name
            owned = set()
            for model in (Job, Instance):
                for row in s.scalars(select(model).where(model.state.in_(("running", "stopping")))):
                    owned |= {h["key"] for h in row.handles or []}
                    col = Allocation.job_id if model is Job else Allocation.instance_id
                    held = [a for a in open_allocs if getattr(a, col.key) == row.id]
                    assert len(held) == (row.num_nodes if model is Job else 1), (model.__name__, row.id, held)
        assert sorted(owned) == self.fake.running_keys()


_TEMPLATES: dict[tuple[tuple[str, ...], int], Path] = {}


def _template(node_names: tuple[str, ...], gpus: int) -> Path:
    """A server's database (``build``: migrated, bootstrapped) with ``node_names`` of the
    fake backend; built once per test process and copied for each test (a migration
    costs more than a whole scenario)."""
    key = (node_names, gpus)
    if key not in _TEMPLATES:
        root = Path(tempfile.mkdtemp(prefix="suanli-fake-loop-"))
        atexit.register(shutil.rmtree, root, True)
        inv = Inventory(
            nodes=[NodeDecl(name=n, gpu_model="H100", gpu_count=gpus, cpu_cores=32, memory_gib=256) for n in node_names]
        )
        ctx, _ = build(root / "data", f"sqlite:///{root / 'suanli.db'}", start_loop=False, inventory=inv)
        with ctx.db.transaction() as s:  # the inventory format names real backends only
            s.execute(update(Node).values(backend="memory"))
        ctx.db.dispose()  # the last connection checkpoints the WAL into the file
        _TEMPLATES[key] = root / "suanli.db"
    return _TEMPLATES[key]


def _no_fsync(dbapi_conn, _record) -> None:  # type: ignore[no-untyped-def]
    """Commits without fsync: a test needs no durability, and a slow disk's fsync per
    commit would be most of a tick."""
    dbapi_conn.execute("PRAGMA synchronous=OFF")


def make_rig(tmp_path: Path, node_names: tuple[str, ...] = ("m1", "m2"), gpus: int = 4) -> Rig:
    """A fresh copy of the template database, and the loop of ``make_loop`` driving only
    the fake backend, which knows ``node_names``."""
    shutil.copyfile(_template(node_names, gpus), tmp_path / "suanli.db")
    db = Database(f"sqlite:///{tmp_path / 'suanli.db'}")
    event.listen(db.engine, "connect", _no_fsync)
    (tmp_path / "data").mkdir()
    fake = InMemoryBackend("memory", node_names)
    clock = ManualClock(time.time())  # near the wall clock, which the database's timestamps use
    return Rig(make_loop(db, {"memory": fake}, tmp_path / "data", clock), fake, clock)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    r = make_rig(tmp_path)
    try:
        yield r
    finally:
        r.db.dispose()


def only(r: Rig, *keep: str) -> None:
    """Cordon every other node (and uncordon ``keep``), so the test decides where work may go."""
    for n, _ in nodes.list_nodes(r.db):
        if n.name not in keep:
            nodes.set_state(r.db, ADMIN, n.name, "cordoned")
        elif n.state == "cordoned":
            nodes.set_state(r.db, ADMIN, n.name, "ready")


# -- launch ----------------------------------------------------------------------------------
def test_a_launch_submits_what_its_claim_planned_and_writes_once(rig: Rig) -> None:
    """The claim's transaction has just read the row and its allocations: the launch is
    planned there (``launcher.plan``), and the launch's own thread only submits and then
    records the outcome, one transaction per row (it read them again in one more)."""
    ids = [rig.submit("H100:1", name=f"w{i}") for i in range(3)]
    launch_transactions = []
    event.listen(
        rig.db.engine,
        "begin",
        lambda _c: threading.current_thread().name.startswith("suanli-launch") and launch_transactions.append(1),
    )
    rig.tick()
    assert [rig.job(j).state for j in ids] == ["running"] * 3
    assert len(launch_transactions) == 3
    by_key = {spec.key: spec for spec in rig.fake.submitted}
    for j in ids:
        spec = by_key[task_key("job", j)]
        assert spec.env["SUANLI_JOB_ID"] == str(j) and spec.node in ("m1", "m2")
        assert list(spec.gpu_indices) == rig.allocations_of(j)[0].gpu_indices
    rig.assert_consistent()


# -- reconcile -------------------------------------------------------------------------------
def test_exit_codes_settle_jobs_and_free_their_gpus(rig: Rig) -> None:
    ok, bad = rig.submit("H100:2"), rig.submit("H100:2")
    rig.tick()
    assert rig.job(ok).state == rig.job(bad).state == "running"
    # launches run several at once (the loop's pool): the order of submits is not the order of rows
    assert sorted(s.key for s in rig.fake.submitted) == [task_key("job", ok), task_key("job", bad)]
    rig.assert_consistent()
    rig.fake.exit(task_key("job", ok), 0)
    rig.fake.exit(task_key("job", bad), 1)
    rig.tick()
    assert (rig.job(ok).state, rig.job(ok).exit_code) == ("succeeded", 0)
    assert (rig.job(bad).state, rig.job(bad).exit_code) == ("failed", 1)
    assert rig.events("job", bad)[-1] == ("failed", "exited with code 1")
    assert rig.nodes_of("job", ok) == rig.nodes_of("job", bad) == []
    rig.assert_consistent()


def test_a_gang_succeeds_when_every_node_exited_and_fails_with_the_first_lost_one(rig: Rig) -> None:
    gang = rig.submit("H100:4", num_nodes=2)
    rig.tick()
    assert rig.job(gang).state == "running" and sorted(rig.nodes_of("job", gang)) == ["m1", "m2"]
    rig.fake.exit(task_key("job", gang, 0), 0)
    rig.tick()
    assert rig.job(gang).state == "running"  # rank 1 still runs
    rig.fake.exit(task_key("job", gang, 1), 0)
    rig.tick()
    assert rig.job(gang).state == "succeeded"

    lost = rig.submit("H100:4", num_nodes=2)
    rig.tick()
    rig.fake.lose(task_key("job", lost, 1))
    rig.tick()
    j = rig.job(lost)
    assert j.state == "failed" and f"task {task_key('job', lost, 1)} failed or was lost" in j.reason
    assert (task_key("job", lost, 0), 1.0) in rig.fake.stopped  # the gang dies together
    rig.assert_consistent()


def test_an_instance_stops_on_request_and_fails_when_its_task_dies(rig: Rig) -> None:
    req = instances.InstanceRequest("box", "H100", 2, 0, None, None, None, 10, "on-demand")
    box, other = instances.create(rig.db, ADMIN, req).id, instances.create(rig.db, ADMIN, req).id
    rig.tick()
    assert rig.instance(box).state == rig.instance(other).state == "running"
    instances.stop(rig.db, ADMIN, box)
    rig.tick()
    assert rig.instance(box).state == "stopped" and (task_key("instance", box), 1.0) in rig.fake.stopped
    rig.fake.exit(task_key("instance", other), 137)
    rig.tick()
    assert rig.instance(other).state == "failed"
    assert rig.nodes_of("instance", box) == rig.nodes_of("instance", other) == []
    rig.assert_consistent()


def test_the_gpus_the_backend_chose_replace_the_planned_ones(rig: Rig) -> None:
    only(rig, "m1")
    job = rig.submit("H100:2")
    rig.tick()
    key = task_key("job", job)
    planned = rig.fake.task(key).spec.gpu_indices
    chosen = tuple(sorted(set(range(4)) - set(planned)))
    rig.fake.choose_gpus(key, chosen)
    rig.tick()
    with rig.db.transaction() as s:
        alloc = s.scalar(select(Allocation).where(Allocation.job_id == job, Allocation.ended_at.is_(None)))
        assert alloc is not None and tuple(alloc.gpu_indices) == chosen
        alloc_id = alloc.id
    assert rig.events("allocation", alloc_id)[-1][1] == f"Memory placed it on GPUs {list(chosen)} (planned {list(planned)})"
    rig.assert_consistent()
    rig.tick()  # asked once: the handle is marked placed
    assert sum("placed it" in m for _, m in rig.events("allocation", alloc_id)) == 1


# -- failover --------------------------------------------------------------------------------
def test_a_node_reported_down_fails_work_over_from_its_checkpoint(rig: Rig) -> None:
    only(rig, "m1")
    job = rig.submit("H100:2", checkpoint_dir="ckpt")
    req = instances.InstanceRequest("box", "H100", 2, 0, None, None, None, 10, "on-demand")
    box = instances.create(rig.db, ADMIN, req).id
    rig.tick()
    assert rig.nodes_of("job", job) == ["m1"] and rig.nodes_of("instance", box) == ["m1"]
    only(rig, "m1", "m2")

    rig.fake.set_health("m1", NodeHealth.DOWN, "NOT_RESPONDING")
    rig.tick()
    assert rig.node_events("m1")[-1] == ("down", "memory: reports m1 DOWN (NOT_RESPONDING)")
    j = rig.job(job)
    assert j.state == "running" and rig.nodes_of("job", job) == ["m2"]
    assert [to for to, _ in rig.events("job", job)][-3:] == ["requeued", "queued", "running"]
    resumed = rig.fake.task(task_key("job", job)).spec
    assert resumed.node == "m2"
    assert resumed.env["SUANLI_RESUME_FROM"] == str(checkpoint_dir(rig.loop.data_dir, job, "ckpt"))
    assert resumed.env["SUANLI_REQUEUES"] == "1"
    assert (task_key("job", job), 0.0) in rig.fake.stopped  # failover stops at once
    inst = rig.instance(box)
    assert inst.state == "failed" and "node m1 is down" in inst.reason
    rig.assert_consistent()

    rig.fake.set_health("m1", NodeHealth.UP)
    rig.tick()
    assert rig.node_state("m1") == "ready" and rig.node_events("m1")[-1] == ("ready", "memory: reports m1 up again")


def test_failover_without_checkpoint_dir_fails_the_job(rig: Rig) -> None:
    only(rig, "m1")
    job = rig.submit("H100:1")
    rig.tick()
    rig.fake.set_health("m1", NodeHealth.DOWN)
    rig.tick()
    j = rig.job(job)
    assert j.state == "failed" and "no checkpoint_dir" in j.reason
    assert rig.node_events("m1")[-1] == ("down", "memory: reports m1 DOWN (no reason)")
    assert len(rig.fake.submitted) == 1
    rig.assert_consistent()


def test_an_operator_s_down_is_not_undone_by_the_backend(rig: Rig) -> None:
    nodes.set_state(rig.db, ADMIN, "m1", "down")
    rig.tick()
    assert rig.node_state("m1") == "down"  # the backend reports it up, but did not take it down


def test_a_stop_that_raises_keeps_the_allocation_and_is_retried_next_tick(rig: Rig) -> None:
    only(rig, "m1")
    job = rig.submit("H100:4", checkpoint_dir="ckpt")
    rig.tick()
    only(rig, "m1", "m2")
    key = task_key("job", job)
    rig.fake.fail_stops(2, key)
    rig.fake.set_health("m1", NodeHealth.DOWN, "NOT_RESPONDING")
    for attempt in (1, 2):
        rig.tick()
        assert rig.fake.failed_stops == [key] * attempt
        assert rig.job(job).state == "running" and rig.nodes_of("job", job) == ["m1"]  # not released: not known stopped
        rig.assert_consistent()
    rig.tick()
    assert rig.nodes_of("job", job) == ["m2"] and rig.fake.task(key).spec.node == "m2"
    assert [to for to, _ in rig.events("job", job)][-3:] == ["requeued", "queued", "running"]
    rig.assert_consistent()


def test_a_cancel_whose_stop_raises_keeps_the_allocation_until_a_stop_succeeds(rig: Rig) -> None:
    job = rig.submit("H100:4")
    rig.tick()
    rig.fake.fail_stops(1, task_key("job", job))
    jobs.cancel(rig.db, ADMIN, job)
    try:
        rig.tick()
    except BackendError:
        pass  # the stop's error may surface from the tick; what matters is what the database keeps
    assert rig.job(job).state == "running" and rig.nodes_of("job", job) != []
    rig.assert_consistent()
    rig.tick()
    assert rig.job(job).state == "cancelled" and rig.nodes_of("job", job) == []
    rig.assert_consistent()


def test_a_stop_that_raises_does_not_hold_up_the_rest_of_the_tick(rig: Rig) -> None:
    job = rig.submit("H100:4")
    rig.tick()
    rig.fake.fail_stops(1, task_key("job", job))
    jobs.cancel(rig.db, ADMIN, job)
    waiting = rig.submit("H100:1")
    rig.tick()
    assert rig.job(waiting).state == "running"


# -- spot reclaim ----------------------------------------------------------------------------
def test_on_demand_work_that_does_not_fit_notices_spot_victims_then_takes_their_place(rig: Rig) -> None:
    only(rig, "m1")
    victim = rig.submit("H100:4", resources={"priority": "spot"}, checkpoint_dir="ckpt")
    rig.tick()
    urgent = rig.submit("H100:4")
    rig.tick()
    vkey = task_key("job", victim)
    assert [n.key for n in rig.fake.notices] == [vkey] and rig.fake.notices[0].signalled
    assert (vkey, int(signal.SIGUSR1)) in rig.fake.signals
    assert rig.events("job", victim)[-1][0] == "noticed"
    assert rig.fake.notices[0].deadline == rig.clock.now() + NOTICE_S
    rig.clock.advance(NOTICE_S - 1)
    rig.tick()  # before the deadline nothing moves
    assert rig.job(victim).state == "running" and rig.job(urgent).state == "queued"
    assert len(rig.fake.notices) == 1  # a notice is given once
    rig.assert_consistent()

    rig.wait_out_notice(vkey)
    rig.tick()
    assert rig.job(urgent).state == "running" and rig.nodes_of("job", urgent) == ["m1"]
    v = rig.job(victim)
    assert v.state == "queued" and v.spec["envs"]["SUANLI_RESUME_FROM"]
    assert (vkey, RECLAIM_GRACE_S) in rig.fake.stopped  # SIGTERM with the grace period
    assert [to for to, _ in rig.events("job", victim)][-2:] == ["requeued", "queued"]
    rig.assert_consistent()


def test_a_gang_beneficiary_notices_a_victim_on_every_node_it_needs(tmp_path: Path) -> None:
    rig = make_rig(tmp_path, ("m1", "m2", "m3"))
    try:
        spots = [rig.submit("H100:4", resources={"priority": "spot"}) for _ in range(3)]
        rig.tick()
        assert all(rig.job(s).state == "running" for s in spots)
        gang = rig.submit("H100:4", num_nodes=2)
        rig.tick()
        noticed = sorted(n.key for n in rig.fake.notices)
        assert len(noticed) == 2  # two nodes lacking, two victims: not the third
        rig.assert_consistent()

        for key in noticed:
            rig.wait_out_notice(key)
        rig.tick()
        g = rig.job(gang)
        assert g.state == "running" and len(set(rig.nodes_of("job", gang))) == 2
        victims = [s for s in spots if task_key("job", s) in noticed]
        assert all(rig.job(v).state == "queued" for v in victims)  # evicted together, requeued
        spared = next(s for s in spots if s not in victims)
        assert rig.job(spared).state == "running"
        rig.assert_consistent()
    finally:
        rig.db.dispose()


def test_a_spot_instance_gets_the_deadline_without_the_signal(rig: Rig) -> None:
    only(rig, "m1")
    req = instances.InstanceRequest("spot-box", "H100", 4, 0, None, None, None, 10, "spot")
    box = instances.create(rig.db, ADMIN, req).id
    rig.tick()
    rig.submit("H100:4")
    rig.tick()
    assert [(n.key, n.signalled) for n in rig.fake.notices] == [(task_key("instance", box), False)]
    assert rig.fake.signals == []  # its keeper would die of SIGUSR1
    rig.assert_consistent()


# -- the capability protocols on their own ----------------------------------------------------
class _Unreporting(InMemoryBackend):
    def node_health(self) -> list[NodeReport]:
        raise BackendError("injected: the controller does not answer")


def test_a_backend_that_cannot_report_is_skipped_and_one_without_the_capability_is_not_asked(tmp_path: Path) -> None:
    rig = make_rig(tmp_path)
    try:
        broken = _Unreporting("memory", ("m1", "m2"))
        assert health.sync_node_health(rig.db, {"memory": broken}) == []

        class Bare:  # only the required protocol: no notices, no reports
            name = "memory"

        assert health.sync_node_health(rig.db, [Bare()]) == [] and health.sync_placements(rig.db, [Bare()]) == 0  # type: ignore[list-item]
        rig.fake.set_health("m2", NodeHealth.DRAINING, "maintenance")
        rig.fake.set_health("m1", NodeHealth.DOWN, "gone")
        assert health.sync_node_health(rig.db, rig.loop.backends) == ["m1"]  # draining is not down
    finally:
        rig.db.dispose()


def test_deliver_notice_uses_the_backend_s_notice_or_a_bare_sigusr1() -> None:
    fake = InMemoryBackend()
    from suanli.backends.base import TaskSpec

    h = fake.submit(TaskSpec("job-1-0", "job", 1, "m1", 0, "run"))
    deliver_notice(fake, h, 123.0, send_signal=False)
    assert [(n.key, n.deadline, n.signalled) for n in fake.notices] == [("job-1-0", 123.0, False)] and fake.signals == []

    class SignalOnly:
        name = "plain"

        def __init__(self) -> None:
            self.sent: list[tuple[str, int]] = []

        def signal(self, handle: Handle, sig: int) -> None:
            self.sent.append((handle.key, sig))

    plain = SignalOnly()
    deliver_notice(plain, h, 123.0)  # type: ignore[arg-type]
    deliver_notice(plain, h, 123.0, send_signal=False)  # type: ignore[arg-type]
    assert plain.sent == [("job-1-0", int(signal.SIGUSR1))]
    assert fake.status(h).state == TaskState.RUNNING


def test_an_allocation_ends_when_the_backend_says_its_work_ended(rig: Rig) -> None:
    """The end a backend reports (exit file, FinishedAt, Slurm's End) ends the allocation,
    not the tick that noticed; a gang ends with its last node; never before the start,
    never in the future; no report: the moment it was noticed."""
    one, gang, early, late, silent = (
        rig.submit("H100:1"),
        rig.submit("H100:1", num_nodes=2),
        rig.submit("H100:1"),
        rig.submit("H100:1"),
        rig.submit("H100:1"),
    )
    rig.tick()
    with rig.db.transaction() as s:  # they started a minute ago, so their ends lie in the past
        for a in s.scalars(select(Allocation)):
            a.started_at -= timedelta(seconds=60)
    start = {j: rig.allocations_of(j)[0].started_at.timestamp() for j in (one, gang, early, late, silent)}
    rig.fake.exit(task_key("job", one), 0, at=start[one] + 2.5)
    rig.fake.exit(task_key("job", gang, 0), 0, at=start[gang] + 1.0)
    rig.fake.exit(task_key("job", gang, 1), 0, at=start[gang] + 3.0)
    rig.fake.exit(task_key("job", early), 0, at=start[early] - 100)
    rig.fake.exit(task_key("job", late), 0, at=time.time() + 3600)
    rig.fake.exit(task_key("job", silent), 0)
    before = time.time()
    rig.tick()
    ends = {j: [a.ended_at.timestamp() for a in rig.allocations_of(j)] for j in start}
    assert ends[one] == [pytest.approx(start[one] + 2.5, abs=0.002)], ends
    assert ends[gang] == [pytest.approx(start[gang] + 3.0, abs=0.002)] * 2, ends
    assert ends[early] == [pytest.approx(start[early], abs=0.002)], ends  # never before its start
    assert before - 1 <= ends[late][0] <= time.time(), ends  # never in the future
    assert before - 1 <= ends[silent][0] <= time.time(), ends
    assert rig.job(one).finished_at.timestamp() == pytest.approx(start[one] + 2.5, abs=0.002)
    assert rig.job(one).state == "succeeded"
    rig.assert_consistent()


def test_only_a_tenant_out_of_funds_is_noticed_and_a_top_up_withdraws_the_notice(rig: Rig) -> None:
    """The funds phase reads only the work it may act on (``control.funds``): running work
    of a tenant whose prepaid balance is spent gets a notice, another tenant's does not,
    and a top-up within the grace withdraws it."""
    members = {}
    for name in ("lab", "other"):
        accounts.create_tenant(rig.db, ADMIN, name)
        billing_store.topup(rig.db, name, "100")
        user, _ = accounts.create_user(rig.db, ADMIN, f"{name}-user", "member", name)
        members[name] = Principal(user_id=user.id, tenant_id=user.tenant_id, name=user.name, role="member")
    ask = instances.InstanceRequest("box", "H100", 1, 0, None, None, None, 0, "on-demand")
    ids = {name: instances.create(rig.db, who, ask).id for name, who in members.items()}
    rig.tick(2)
    assert [rig.instance(i).state for i in ids.values()] == ["running", "running"]
    billing_store.record_transfer(rig.db, "lab", "10000")  # ¥1,200 of transfer: lab's ¥100 is spent
    rig.tick()
    assert [n.key for n in rig.fake.notices] == [task_key("instance", ids["lab"])]
    assert rig.instance(ids["lab"]).notice_for == "billing" and rig.instance(ids["other"]).notice_for is None
    billing_store.topup(rig.db, "lab", "10000")
    rig.tick()
    assert rig.instance(ids["lab"]).notice_deadline is None and rig.instance(ids["lab"]).state == "running"
    assert rig.events("instance", ids["lab"])[-1] == ("running", "funds notice withdrawn: the balance covers it again")
    assert len(rig.fake.notices) == 1
    rig.assert_consistent()


def test_a_restarted_loop_plans_for_the_mix_it_served(rig: Rig, tmp_path: Path) -> None:
    """The default policy learns the request mix from arrivals; a loop that starts on a
    database with history shows it the work served before (``learn_served_mix``), not
    the work still waiting, which its first pass sees arrive."""
    from collections import Counter

    from suanli.control.scheduling import to_request
    from suanli.scheduler.policies.target import TaskShape

    served = [rig.submit("H100:1"), rig.submit("H100:1"), rig.submit("H100:2")]
    rig.tick()
    assert [rig.job(j).state for j in served] == ["running"] * 3
    rig.fake.exit(task_key("job", served[0]), 0)
    rig.tick()
    only(rig)  # every node cordoned: the next job waits
    waiting = rig.submit("H100:3")
    rig.tick()
    assert rig.job(waiting).state == "queued"
    restarted = make_loop(rig.db, {"memory": rig.fake}, tmp_path / "data", rig.clock)
    online = restarted.policy.online
    assert online is not None and not online.counts
    restarted.recover()
    assert online.counts == Counter(TaskShape.of(to_request(rig.job(j))) for j in served)
    assert TaskShape.of(to_request(rig.job(waiting))) not in online.counts
    assert restarted.policy.target.shapes  # a mix to plan for from the first pass on
    rig.assert_consistent()


def test_a_restarted_loop_that_finds_work_ended_wakes_billing_at_once(rig: Rig, tmp_path: Path) -> None:
    """Work that ended while no server watched is settled by ``recover``, not a tick: it
    wakes billing as a tick's ends do, so the usage does not wait a billing interval."""
    job = rig.submit("H100:1")
    rig.tick()
    assert rig.job(job).state == "running"
    rig.fake.exit(task_key("job", job), 0)  # while the server is down
    restarted = make_loop(rig.db, {"memory": rig.fake}, tmp_path / "data", rig.clock)
    woken: list[str] = []
    restarted.work_ended = lambda: woken.append(rig.job(job).state)
    restarted.recover()
    assert woken == ["succeeded"]
    again = make_loop(rig.db, {"memory": rig.fake}, tmp_path / "data", rig.clock)
    again.work_ended = lambda: woken.append("again")
    again.recover()
    assert woken == ["succeeded"]  # nothing ended this time: billing is left to its interval
    rig.assert_consistent()


def test_a_tick_with_no_work_is_one_read_and_work_makes_the_next_tick_whole(rig: Rig) -> None:
    """Nothing waits, runs or is being launched: the tick reads that once and skips phases
    2-9 (health is not due here); a submitted job makes the tick whole again until its
    work has ended."""
    rig.tick()
    rig.loop.health_interval_s = 3600.0  # health was synced by that tick; not due again in this test
    statements: list[str] = []
    event.listen(rig.db.engine, "before_cursor_execute", lambda _c, _cur, sql, *_: statements.append(sql))
    rig.tick()
    assert rig.loop.idle
    reads = [sql for sql in statements if sql.strip().upper() != "BEGIN"]  # SQLite's BEGIN (db.session)
    assert len(reads) == 1 and "EXISTS" in reads[0], reads
    job = rig.submit("H100:2")
    statements.clear()
    rig.tick()
    assert not rig.loop.idle and rig.job(job).state == "running" and len(statements) > 2
    rig.tick()
    assert not rig.loop.idle  # it runs: the loop polls it
    rig.fake.exit(task_key("job", job), 0)
    rig.tick()
    assert rig.job(job).state == "succeeded"
    rig.tick()
    assert rig.loop.idle
    rig.assert_consistent()


def test_an_idle_loop_sleeps_until_its_idle_wait_and_a_wake_ticks_at_once(rig: Rig) -> None:
    loop = rig.loop
    loop.interval_s, loop.idle_wait_s = 0.01, 3600.0
    loop.start()
    try:
        wait_until(lambda: loop.stats.ticks > 0 and loop.idle, 10)
        ticks = loop.stats.ticks
        time.sleep(0.3)  # thirty intervals: the loop, idle, sleeps its idle wait instead
        assert loop.stats.ticks == ticks
        job = rig.submit("H100:1")
        loop.wake()
        wait_until(lambda: rig.job(job).state == "running", 10)
    finally:
        loop.stop()
    rig.assert_consistent()

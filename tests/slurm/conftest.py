"""Fixtures for tests against the real Slurm cluster of ``scripts/slurm-cluster``.

Tests marked ``slurm`` get a ``SlurmClient`` for the cluster ``$SLURM_CONF`` names. Where
there is none they skip with the reason, unless the test command started the cluster
(``SUANLI_SLURM_REQUIRED=1``, set by ``scripts/slurm-cluster run``): then a missing
controller is a failure, not a skip, so CI cannot go green without real daemons.

Several test runs may share one cluster on a developer machine; a file lock under the
cluster's root serialises their Slurm tests, because the tests count free GPUs. Each test
holds it from its setup to the end of its teardown (its jobs gone): held for a whole
session, another run's Slurm tests waited for every other test of that session too.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from suanli.backends.slurm import SlurmClient
from tests.slurm.slurm_helpers import Jobs, cluster_root

LOCK_WAIT_S = 300.0


def _unavailable(reason: str) -> None:
    if os.environ.get("SUANLI_SLURM_REQUIRED") == "1":
        pytest.fail(f"Slurm cluster required by this run but unusable: {reason}", pytrace=False)
    pytest.skip(f"no Slurm cluster: {reason}")


@pytest.fixture(scope="session")
def slurm() -> SlurmClient:
    """The test cluster's client (``_cluster_lock`` keeps other runs off while a test uses it)."""
    why = os.environ.get("SUANLI_SLURM_SKIP")
    if why:
        pytest.skip(f"no Slurm cluster: {why}")
    conf = os.environ.get("SLURM_CONF")
    if not conf or not Path(conf).is_file():
        _unavailable(
            "SLURM_CONF is not set to a slurm.conf; run `scripts/slurm-cluster start` and "
            '`eval "$(scripts/slurm-cluster env)"` (root, Debian), or use scripts/test'
        )
    client = SlurmClient(slurm_conf=Path(conf))
    if not client.ping():
        _unavailable(f"the controller of {conf} does not answer `scontrol ping`")
    return client


@contextmanager
def _cluster_lock(client: SlurmClient) -> Iterator[None]:
    path = cluster_root(client) / "tests.lock"
    with open(path, "w") as lock:
        deadline = time.monotonic() + LOCK_WAIT_S
        while True:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    pytest.fail(f"another test run held {path} for {LOCK_WAIT_S:.0f}s")
                time.sleep(0.1)
        yield


@pytest.fixture(autouse=True)
def _slurm_marked_tests_need_the_cluster(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test that uses the cluster holds its lock; first of the test's own fixtures, it
    is torn down last, after theirs have cancelled what the test started."""
    if not (request.node.get_closest_marker("slurm") or "slurm" in request.fixturenames):
        yield
        return
    with _cluster_lock(request.getfixturevalue("slurm")):
        yield


@pytest.fixture
def jobs(slurm: SlurmClient, tmp_path: Path) -> Iterator[Jobs]:
    tmp_path.chmod(0o777)
    tracker = Jobs(slurm, tmp_path)
    yield tracker
    tracker.cancel_all()

"""What every phase of a control-loop tick works on.

One value instead of six arguments threaded through every phase, so a phase's
signature says only what it decides; the clock is one of them, so a test (or the
simulator) decides what "now" is. The reclaim settings live here because
failover, notice expiry, outbid, preemption and migration all read them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from suanli.backends.base import Backend
from suanli.clock import SYSTEM, Clock
from suanli.control.secrets import Keyring
from suanli.db.session import Database

#: The spot reclaim notice a victim gets before SIGTERM, seconds (as on AWS: two minutes
#: there, five here by default; the server's ``--notice``).
DEFAULT_NOTICE_S = 300.0


@dataclass
class ReclaimSettings:
    #: seconds between a spot victim's SIGUSR1 and its SIGTERM
    notice_s: float = DEFAULT_NOTICE_S
    #: seconds between SIGTERM and SIGKILL when work is stopped
    grace_s: float = 10.0
    #: ``scheduler.preemption`` strategy choosing victims
    strategy: str = "least_lost_work"

    def __post_init__(self) -> None:
        if self.notice_s < 0 or self.grace_s < 0:
            raise ValueError("notice_s and grace_s must be >= 0")


#: The migration planners (``scheduler.repack.PLANNERS``), named here so settings are
#: checked without importing the planners.
PLANNER_NAMES = ("direct", "repack")


@dataclass
class MigrationSettings:
    """Migration of running shares for whole-GPU work that fragmentation keeps waiting
    (``control.migrate``). Off by default: a move interrupts a renter's job."""

    #: at most this many shares moved for one waiting request; 0: no migration
    moves: int = 0
    #: ``direct`` (single moves, ``scheduler.defrag``) or ``repack`` (chains, CP-SAT)
    planner: str = "direct"
    #: a request is not planned for again within this many seconds (its moves take a
    #: notice; a plan that finds nothing costs up to half a second)
    retry_s: float = 300.0

    def __post_init__(self) -> None:
        if self.moves < 0 or self.retry_s < 0:
            raise ValueError("moves and retry_s must be >= 0")
        if self.planner not in PLANNER_NAMES:
            raise ValueError(f"unknown migration planner {self.planner!r}; choose {' or '.join(PLANNER_NAMES)}")


@dataclass
class PhaseStats:
    """The reclaim phases' counters since the loop started; published with the loop's
    own (``loop_report.Counters``, ``loop_status``: the same names) and exported by
    ``/metrics``."""

    notices: int = 0
    reclaimed: int = 0
    migrations: int = 0  #: shares noticed to move for waiting whole-GPU work
    failed_over: int = 0


@dataclass
class Plane:
    db: Database
    backends: dict[str, Backend]
    data_dir: Path
    reclaim: ReclaimSettings = field(default_factory=ReclaimSettings)
    migration: MigrationSettings = field(default_factory=MigrationSettings)
    stats: PhaseStats = field(default_factory=PhaseStats)
    #: what "now" is for notices and lost work (``suanli.clock``: a ManualClock in tests)
    clock: Clock = SYSTEM
    #: opens workloads' sealed secrets, at launch only (``control.secrets``)
    keyring: Keyring = field(kw_only=True)

"""What every phase of a control-loop tick works on.

One value instead of six arguments threaded through every phase, so a phase's
signature says only what it decides; the clock is one of them, so a test (or the
simulator) decides what "now" is. The reclaim settings live here because
failover, notice expiry, outbid and preemption all read them.
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


@dataclass
class PhaseStats:
    notices: int = 0
    reclaimed: int = 0
    failed_over: int = 0


@dataclass
class Plane:
    db: Database
    backends: dict[str, Backend]
    data_dir: Path
    reclaim: ReclaimSettings = field(default_factory=ReclaimSettings)
    stats: PhaseStats = field(default_factory=PhaseStats)
    #: what "now" is for notices and lost work (``suanli.clock``: a ManualClock in tests)
    clock: Clock = SYSTEM
    #: opens workloads' sealed secrets, at launch only (``control.secrets``)
    keyring: Keyring = field(kw_only=True)

"""Suanli's default policy (work in progress: FGD until measured otherwise)."""

from __future__ import annotations

from suanli.scheduler.policies.fgd import FGD


class SuanliPolicy(FGD):
    name = "suanli"

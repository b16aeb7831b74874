"""torch for the verify tests: skipped with the reason where it is missing, required in CI.

torch is an optional extra (``pip install 'suanli[torch]'``). A test that measures
calls ``require_torch()``: without torch it skips and says how to install it; with
``SUANLI_TORCH=require`` (CI, which installs the extra) a missing torch fails the test.
"""

from __future__ import annotations

import os
from types import ModuleType

import pytest

INSTALL = "torch is not installed: pip install 'suanli[torch]' (torch==2.13.0)"


def require_torch() -> ModuleType:
    mode = os.environ.get("SUANLI_TORCH", "")
    if mode not in ("", "require", "optional"):
        pytest.fail(f"SUANLI_TORCH={mode!r}: use 'require' (CI) or leave it unset")
    if mode == "require":
        try:
            import torch
        except ImportError as exc:
            pytest.fail(f"SUANLI_TORCH=require but {INSTALL} ({exc})")
        return torch
    return pytest.importorskip("torch", reason=INSTALL)

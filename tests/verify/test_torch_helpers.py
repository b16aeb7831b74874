"""``require_torch``: skip with the reason without torch, fail instead under SUANLI_TORCH=require (CI)."""

from __future__ import annotations

import sys

import pytest

from tests.verify.torch_helpers import require_torch


def test_without_torch_a_test_skips_and_under_require_it_fails(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now raises ModuleNotFoundError
    monkeypatch.delenv("SUANLI_TORCH", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"pip install 'suanli\[torch\]'"):
        require_torch()
    monkeypatch.setenv("SUANLI_TORCH", "require")
    with pytest.raises(pytest.fail.Exception, match="SUANLI_TORCH=require but torch is not installed"):
        require_torch()
    monkeypatch.setenv("SUANLI_TORCH", "yes")
    with pytest.raises(pytest.fail.Exception, match="use 'require'"):
        require_torch()

"""Which container engine the local backend uses: one that can list its containers.

An engine that cannot is stood in for by a script named ``podman`` that fails (the real
Podman here answers, and one whose store is gone cannot be made without breaking the
host's); one that answers, by the same script succeeding. The script records what it
was asked, so the test also says that detection asks ``ps`` alone: Podman's ``info``
costs a quarter of a CPU-second, in every process of a server (issue 11)."""

from __future__ import annotations

from pathlib import Path

import pytest

from suanli.backends.base import BackendError
from suanli.backends.local import LocalBackend
from suanli.backends.local.engine import detect


def stand_in_engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, exit_code: int) -> Path:
    """A ``podman`` first on PATH (the only engine there) that exits with ``exit_code``;
    returns the file where it writes each command line it gets."""
    bin_dir, asked = tmp_path / "bin", tmp_path / "asked"
    bin_dir.mkdir()
    script = bin_dir / "podman"
    script.write_text(f'#!/bin/sh\necho "$*" >> {asked}\nexit {exit_code}\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/bin")
    return asked


def test_an_engine_that_cannot_list_its_containers_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    asked = stand_in_engine(tmp_path, monkeypatch, exit_code=125)
    assert detect() is None
    assert LocalBackend(tmp_path / "auto", "auto").runtime == "process"
    with pytest.raises(BackendError, match="no container engine answers here"):
        LocalBackend(tmp_path / "container", "container")
    assert {line.split()[0] for line in asked.read_text().splitlines()} == {"ps"}


def test_an_engine_that_lists_its_containers_is_used_and_asked_nothing_else(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = stand_in_engine(tmp_path, monkeypatch, exit_code=0)
    engine = detect()
    assert engine is not None and engine.facts.binary == "podman"
    assert LocalBackend(tmp_path / "auto", "auto").runtime == "container"
    assert [line.split()[0] for line in asked.read_text().splitlines()] == ["ps", "ps"]

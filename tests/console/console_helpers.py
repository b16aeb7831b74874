"""Factories of the console suite."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.containers.container_helpers import release_data_dir
from tests.control.control_helpers import ServerProcess, free_port


@contextmanager
def container_server_process(tmp_path: Path, image: str) -> Iterator[ServerProcess]:
    """A server whose local backend runs real Podman containers, with ``image`` built here
    when missing (minutes), or a skip with the reason."""
    from suanli.backends.local import imagebuild
    from suanli.backends.local.engine import detect

    if detect("podman") is None:
        if os.environ.get("SUANLI_CONTAINERS") == "require":
            pytest.fail("SUANLI_CONTAINERS=require: no Podman answers on this machine")
        pytest.skip("no Podman answers on this machine (scripts/images installs it)")
    imagebuild.pull_or_build(image, "podman", progress=lambda line: None)
    srv = ServerProcess(tmp_path / "data", None, free_port(), args=("--runtime", "container")).start()
    try:
        yield srv
    finally:
        srv.stop()
        release_data_dir(srv.data_dir)

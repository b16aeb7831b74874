"""Paths a renter may name: only inside their own workload's volume (``/workspace``).

A task's ``checkpoint_dir`` once took any absolute path and the server created it as its
own user, on another tenant's disk if asked. Now it is relative to ``/workspace`` or
under it, ``..`` never climbs out, and the server checks the resolved host path again
before creating anything, so a symlink the workload left in its volume cannot lead out.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

WORKSPACE = PurePosixPath("/workspace")


def volume_path(requested: str) -> str:
    """``requested`` relative to the volume (``ckpt``, ``/workspace/ckpt`` -> ``ckpt``;
    ``/workspace`` -> ``""``); ``ValueError`` saying why for a path outside it."""
    if not requested.strip() or "\0" in requested:
        raise ValueError("an empty path or one with a NUL byte names no directory")
    path = PurePosixPath(requested)
    if path.is_absolute():
        if path.parts[:2] != ("/", "workspace") or requested.startswith("//"):
            raise ValueError(
                f"{requested!r} is outside the job's volume: give a path relative to /workspace (e.g. ckpt) or under it"
            )
        path = PurePosixPath(*path.parts[2:]) if len(path.parts) > 2 else PurePosixPath()
    if ".." in path.parts:
        raise ValueError(f"{requested!r} climbs out with '..': paths stay inside the job's volume")
    if path.parts[:1] and path.parts[0].startswith("~"):
        raise ValueError(f"{requested!r}: '~' is not expanded; give a path relative to /workspace")
    return "" if not path.parts else str(path)


def inside(volume: Path, relative: str) -> Path:
    """The host path of ``relative`` in ``volume``, refused (``ValueError``) when it
    resolves outside it (a symlink in the volume pointing elsewhere)."""
    root = Path(volume).resolve()
    target = (root / volume_path(relative)).resolve() if relative else root
    if target != root and not target.is_relative_to(root):
        raise ValueError(f"{relative!r} leads outside the job's volume (a symlink?)")
    return target

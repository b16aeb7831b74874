"""Persistent volumes of a size that is enforced: an ext4 filesystem in a sparse file,
loop-mounted at the volume's directory.

A bind-mounted host directory has no size: one renter could fill the host's disk. A
filesystem of its own cannot grow past what was rented; a write past it fails with
``ENOSPC`` inside the container, as on a real disk. The file is sparse, so a 50 GiB
disk costs only what is written. Where loop devices cannot be used (no root, no
``/dev/loop-control``), the volume is a plain directory and ``mount_sized`` says so: the
caller reports the quota as not enforced.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
from pathlib import Path

log = logging.getLogger(__name__)


def image_of(path: Path) -> Path:
    return path.with_name(path.name + ".ext4")


def mounted(path: Path) -> bool:
    return os.path.ismount(path)


def mount_sized(path: Path, gib: int) -> bool:
    """Make ``path`` a filesystem of ``gib`` GiB (created on first use, kept after); True
    if the size is enforced."""
    path.mkdir(parents=True, exist_ok=True)
    if mounted(path):
        return True
    img = image_of(path)
    try:
        if not img.exists():
            with open(img, "wb") as f:
                f.truncate(gib << 30)
            os.chmod(img, 0o600)
            subprocess.run(
                ["mkfs.ext4", "-q", "-F", "-m", "0", "-E", "lazy_itable_init=1,lazy_journal_init=1", str(img)],
                check=True,
                capture_output=True,
                timeout=120,
            )
        elif img.stat().st_size < gib << 30:  # a bigger disk was asked for: grow it
            with open(img, "r+b") as f:
                f.truncate(gib << 30)
            subprocess.run(["e2fsck", "-f", "-p", str(img)], capture_output=True, timeout=300)
            subprocess.run(["resize2fs", str(img)], check=True, capture_output=True, timeout=300)
        if any(path.iterdir()):  # a plain directory from before: keep what it holds
            staged = path.with_name(path.name + ".migrating")
            path.rename(staged)
            path.mkdir()
            subprocess.run(["mount", "-o", "loop", str(img), str(path)], check=True, capture_output=True, timeout=60)
            for item in staged.iterdir():
                shutil.move(str(item), path / item.name)
            staged.rmdir()
        else:
            subprocess.run(["mount", "-o", "loop", str(img), str(path)], check=True, capture_output=True, timeout=60)
        shutil.rmtree(path / "lost+found", ignore_errors=True)
        return True
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        err = getattr(exc, "stderr", b"") or b""
        log.warning("volume %s: size not enforced (%s %s)", path, exc, err.decode(errors="replace").strip())
        return False


def unmount(path: Path) -> None:
    if mounted(path):
        subprocess.run(["umount", str(path)], capture_output=True, timeout=60)
        if mounted(path):  # still busy: detach it, the kernel frees it when the last user goes
            subprocess.run(["umount", "-l", str(path)], capture_output=True, timeout=60)


def remove(path: Path) -> None:
    """Delete a volume and everything in it."""
    unmount(path)
    shutil.rmtree(path, ignore_errors=True)
    image_of(path).unlink(missing_ok=True)

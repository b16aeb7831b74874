"""A tenant's uploaded code archives (what ``suanli launch`` sends for a task's ``workdir``).

Why this exists: a job used to name a directory *on the server* as its working directory,
so a renter could point a job at any server path, and a missing one was silently replaced
by an empty directory. Now the CLI packs the renter's local directory into a gzip tar,
uploads it, and the job refers to it by id; the launcher unpacks it into the job's volume.

Layout: ``<data_dir>/uploads/tenant-<id>/<sha256>.tar.gz`` (directories 0700, files 0600).
The id *is* the SHA-256 of the archive: content-addressed, so uploading the same tree
twice stores it once, and an id of one tenant means nothing in another's directory.

An archive is kept only once it is checked whole: a gzip tar of regular files and
directories with safe relative names (no absolute paths, no ``..``, no links, no devices),
at most ``max_bytes`` packed and ``UNPACK_RATIO`` times that unpacked (a gzip bomb of
zeros would otherwise fill the job's disk at launch). Anything else is refused naming the
offending member, and nothing is kept.
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import shutil
import tarfile
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from suanli.errors import Invalid, NotFound

DEFAULT_MAX_BYTES = 100 * 1024 * 1024
#: unpacked size allowed per packed byte cap (source code packs 3-10x)
UNPACK_RATIO = 10
MAX_MEMBERS = 200_000
CHUNK = 1024 * 1024
UPLOAD_ID = re.compile(r"^[0-9a-f]{64}$")


class TooLarge(Invalid):
    """Over the server's upload cap (HTTP 413: ``suanli.api.errors.STATUS``)."""

    code = "too_large"


@dataclass(frozen=True)
class UploadInfo:
    id: str
    size: int
    sha256: str


def mib(n: int) -> str:
    return f"{n / (1024 * 1024):.1f} MiB"


def _private_dir(path: Path) -> Path:
    """Create ``path`` 0700 (and ``uploads/`` above it) whatever the umask."""
    for p in (path.parent, path):
        p.mkdir(mode=0o700, exist_ok=True)
        os.chmod(p, 0o700)
    return path


def tenant_dir(data_dir: Path, tenant_id: int) -> Path:
    return Path(data_dir) / "uploads" / f"tenant-{int(tenant_id)}"


def check_id(upload_id: str) -> str:
    if not isinstance(upload_id, str) or not UPLOAD_ID.match(upload_id):
        raise Invalid(f"code: {upload_id!r} is not an upload id (64 lowercase hex digits, the archive's SHA-256)")
    return upload_id


def archive_path(data_dir: Path, tenant_id: int, upload_id: str) -> Path:
    return tenant_dir(data_dir, tenant_id) / f"{check_id(upload_id)}.tar.gz"


def exists(data_dir: Path, tenant_id: int, upload_id: str) -> bool:
    if not isinstance(upload_id, str) or not UPLOAD_ID.match(upload_id):
        return False
    return archive_path(data_dir, tenant_id, upload_id).is_file()


def size_of(data_dir: Path, tenant_id: int, upload_id: str) -> int:
    path = archive_path(data_dir, tenant_id, upload_id)
    if not path.is_file():
        raise NotFound(f"no upload {upload_id} for this tenant")
    return path.stat().st_size


def too_large(max_bytes: int, size: int, exact: bool = True) -> TooLarge:
    got = f"{size} bytes ({mib(size)})" if exact else f"at least {size} bytes received"
    return TooLarge(f"the upload is over the cap of {max_bytes} bytes ({mib(max_bytes)}): {got}")


def _unsafe(member: tarfile.TarInfo) -> str | None:
    """Why this member may not be in a code archive, or None."""
    name = member.name
    if not (member.isfile() or member.isdir()):
        kind = "symlink" if member.issym() else "hard link" if member.islnk() else "device or special file"
        return f"{name!r} is a {kind}: only regular files and directories are allowed"
    if not name or "\x00" in name:
        return f"{name!r} is not a valid name"
    path = PurePosixPath(name)
    if path.is_absolute() or name.startswith("/"):
        return f"{name!r} is an absolute path"
    if ".." in path.parts:
        return f"{name!r} leaves the archive's directory (..)"
    return None


def check_archive(path: Path, max_bytes: int | None) -> None:
    """Raise Invalid unless ``path`` is a gzip tar fit for a job's code (see the module doc);
    ``max_bytes`` None checks the members only, not the unpacked size."""
    limit = max_bytes * UNPACK_RATIO if max_bytes is not None else None
    total = count = 0
    try:
        with tarfile.open(path, mode="r:gz") as tar:
            for member in tar:
                why = _unsafe(member)
                if why:
                    raise Invalid(f"unsafe archive member: {why}")
                count += 1
                total += member.size if member.isfile() else 0
                if count > MAX_MEMBERS:
                    raise Invalid(f"the archive has more than {MAX_MEMBERS} members")
                if limit is not None and total > limit:
                    raise TooLarge(f"the archive unpacks to more than {limit} bytes ({mib(limit)}, {UNPACK_RATIO}x the cap)")
    except (tarfile.TarError, EOFError, zlib.error, OSError) as exc:
        raise Invalid(f"not a gzip tar archive: {exc}") from None


class Writer:
    """An upload in progress: chunks go to a private temporary file while being counted
    and hashed; ``finish`` checks and keeps it, ``abort`` (or any error) drops it.
    The API feeds it from the request stream so an upload over the cap stops as soon
    as the cap is passed, without buffering the body in memory."""

    def __init__(self, data_dir: Path, tenant_id: int, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.dir = _private_dir(tenant_dir(data_dir, tenant_id))
        self.max_bytes = max_bytes
        self.size = 0
        self._hash = hashlib.sha256()
        self.tmp = self.dir / f".part-{secrets.token_hex(8)}"
        self._file: BinaryIO | None = os.fdopen(os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb")

    def write(self, chunk: bytes) -> None:
        assert self._file is not None, "upload already finished"
        self.size += len(chunk)
        if self.size > self.max_bytes:
            self.abort()
            raise too_large(self.max_bytes, self.size, exact=False)
        self._hash.update(chunk)
        self._file.write(chunk)

    def finish(self) -> UploadInfo:
        assert self._file is not None, "upload already finished"
        try:
            self._file.close()
            self._file = None
            if self.size == 0:
                raise Invalid("the upload is empty: send a gzip tar of the code")
            check_archive(self.tmp, self.max_bytes)
            digest = self._hash.hexdigest()
            final = self.dir / f"{digest}.tar.gz"
            if final.is_file():  # the same tree again: already kept
                self.tmp.unlink(missing_ok=True)
            else:
                os.chmod(self.tmp, 0o600)
                os.replace(self.tmp, final)
            return UploadInfo(digest, self.size, digest)
        except BaseException:
            self.abort()
            raise

    def abort(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
        self.tmp.unlink(missing_ok=True)


def save(
    data_dir: Path, tenant_id: int, source: bytes | BinaryIO | Iterable[bytes], max_bytes: int = DEFAULT_MAX_BYTES
) -> UploadInfo:
    """Check and keep an archive given as bytes, a binary file or an iterable of chunks."""
    writer = Writer(data_dir, tenant_id, max_bytes)
    try:
        if isinstance(source, (bytes, bytearray, memoryview)):
            if len(source) > max_bytes:
                raise too_large(max_bytes, len(source))
            chunks: Iterable[bytes] = [bytes(source)]
        elif hasattr(source, "read"):
            chunks = iter(lambda: source.read(CHUNK), b"")
        else:
            chunks = source
        for chunk in chunks:
            writer.write(chunk)
    except BaseException:
        writer.abort()
        raise
    return writer.finish()


def _private(member: tarfile.TarInfo, dest: str) -> tarfile.TarInfo | None:
    """tarfile's ``data`` filter, then the owner's bits only: what lies in the data
    directory is private to the server's user (a directory stays traversable)."""
    safe = tarfile.data_filter(member, dest)
    if safe is None or safe.mode is None:
        return safe
    return safe.replace(mode=(safe.mode & 0o700) | (0o700 if safe.isdir() else 0), deep=False)


def extract_into(data_dir: Path, tenant_id: int, upload_id: str, dest: Path, max_bytes: int | None = None) -> None:
    """Unpack a tenant's upload so that ``dest`` holds exactly the uploaded tree.

    ``dest`` is *replaced*: the archive is unpacked into a fresh sibling directory and
    then swapped in, so a relaunch (requeue, failover) starts from the uploaded code and
    nothing a previous run left in ``dest`` (a symlink out of it, say) can redirect the
    extraction. The archive is checked again first (it may have been put there around
    the API), then extracted with tarfile's ``data`` filter as a second guard; its unpacked
    size was checked at upload, and is checked again only when ``max_bytes`` is given.
    Files are owned by the server's user with the owner's bits of the archive's modes
    (no setuid, nothing for group or others). Raises NotFound (no such upload) or Invalid (unsafe archive)."""
    dest = Path(dest)
    src = archive_path(data_dir, tenant_id, upload_id)
    if not src.is_file():
        raise NotFound(f"code: no upload {upload_id} for tenant {tenant_id}")
    check_archive(src, max_bytes)
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = dest.parent / f".{dest.name}.unpack-{secrets.token_hex(6)}"
    stage.mkdir(mode=0o700)
    old = dest.parent / f".{dest.name}.old-{secrets.token_hex(6)}"
    try:
        with tarfile.open(src, mode="r:gz") as tar:
            tar.extractall(stage, filter=_private)
        os.chmod(stage, 0o700)
        if dest.is_symlink() or dest.is_file():
            dest.unlink()
        elif dest.exists():
            os.replace(dest, old)
        os.replace(stage, dest)
    except tarfile.TarError as exc:
        raise Invalid(f"code: upload {upload_id} cannot be unpacked safely: {exc}") from None
    finally:
        shutil.rmtree(stage, ignore_errors=True)
        shutil.rmtree(old, ignore_errors=True)

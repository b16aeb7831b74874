"""``suanli launch TASK.yaml``: submit a job from a task file, shipping its code.

A file with ``jobs:`` is a pipeline: its jobs are submitted together, all or nothing
(``POST /v1/pipelines``), each job's workdir shipped once. ``--sweep KEY=V1,V2``
(repeatable) or a task's ``matrix:`` makes one job per combination, listed as one group.

A task's ``workdir`` is a directory on the renter's machine (relative to the YAML). The
CLI packs it into a gzip tar (``.git``, ``__pycache__``, ``.venv`` and the glob patterns
of its ``.suanliignore`` left out), refuses it before sending if it is over the server's
cap, uploads it with a progress bar unless the tenant already has that very archive
(uploads are named by their SHA-256), and submits the task with ``code: <id>`` and no
``workdir``. A missing workdir stops here, before anything exists on the server.
"""

from __future__ import annotations

import fnmatch
import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import BinaryIO

import typer

from suanli.cli import secret_args
from suanli.cli.billing import quote_task
from suanli.cli.jobs import show, wait_for
from suanli.cli.remote import api_errors, client, err_console, print_json
from suanli.cli.taskfile import load_pipeline, parse_sweeps

ALWAYS_SKIP = frozenset({".git", "__pycache__", ".venv"})
IGNORE_FILE = ".suanliignore"


class WorkdirError(ValueError):
    """The task's workdir cannot be shipped (missing, not a directory, over the cap)."""


def workdir_of(task_file: Path, task: dict) -> Path | None:
    """The local directory to ship, checked; None when the task has none."""
    if not task.get("workdir"):
        return None
    if task.get("code"):
        raise WorkdirError(f"{task_file}: set `workdir` (a local directory to upload) or `code` (an upload id), not both")
    path = Path(task["workdir"])
    if not path.exists():
        raise WorkdirError(f"{task_file}: workdir {path} does not exist (it is read from this machine, relative to the YAML)")
    if not path.is_dir():
        raise WorkdirError(f"{task_file}: workdir {path} is not a directory")
    return path


# -- packing ------------------------------------------------------------------------------
def size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def read_ignore(root: Path) -> list[str]:
    """``.suanliignore``: one glob per line, ``#`` comments. A pattern without ``/`` matches
    a name at any depth (``*.ckpt``, ``data``); one with ``/`` matches the path from the
    workdir (``data/raw/*``); a trailing ``/`` matches directories only."""
    try:
        lines = (root / IGNORE_FILE).read_text().splitlines()
    except FileNotFoundError:
        return []
    return [s for s in (line.strip() for line in lines) if s and not s.startswith("#")]


def ignored(rel: str, is_dir: bool, patterns: list[str]) -> bool:
    name = rel.rsplit("/", 1)[-1]
    if name in ALWAYS_SKIP:
        return True
    for pat in patterns:
        if pat.endswith("/"):
            if not is_dir:
                continue
            pat = pat.rstrip("/")
        if "/" in pat:
            if fnmatch.fnmatchcase(rel, pat.lstrip("/")):
                return True
        elif fnmatch.fnmatchcase(name, pat):
            return True
    return False


class _Over(Exception):
    pass


class _Capped:
    """The archive file as gzip writes it: counted, hashed and stopped past the cap."""

    def __init__(self, f: BinaryIO, cap: int) -> None:
        self.f, self.cap, self.size, self.hash = f, cap, 0, hashlib.sha256()

    def write(self, data: bytes) -> int:
        self.size += len(data)
        if self.size > self.cap:
            raise _Over
        self.hash.update(data)
        return self.f.write(data)

    def flush(self) -> None:
        self.f.flush()


@dataclass
class Packed:
    sha256: str = ""
    size: int = 0  #: bytes of the archive
    files: int = 0
    file_bytes: int = 0  #: bytes of the files, unpacked
    skipped: list[str] = field(default_factory=list)  #: symlinks and special files left out
    largest: list[tuple[int, str]] = field(default_factory=list)


def pack(root: Path, out: Path, max_bytes: int, max_unpacked: int | None = None) -> Packed:
    """Write ``root`` as a gzip tar to ``out``; the same tree gives the same bytes (sorted
    names, no owners, gzip without a timestamp), so its SHA-256 names it. Raises
    WorkdirError, with the sizes, once the archive passes ``max_bytes``."""
    patterns = read_ignore(root)
    res = Packed()

    def add(tar: tarfile.TarFile, path: Path, rel: str, st: os.stat_result) -> None:
        info = tarfile.TarInfo(rel)
        info.mtime, info.mode = int(st.st_mtime), stat.S_IMODE(st.st_mode) & 0o755
        if stat.S_ISDIR(st.st_mode):
            info.type = tarfile.DIRTYPE
            tar.addfile(info)
            return
        info.size = st.st_size
        res.files += 1
        res.file_bytes += st.st_size
        res.largest = sorted([*res.largest, (st.st_size, rel)], reverse=True)[:5]
        if max_unpacked is not None and res.file_bytes > max_unpacked:
            raise WorkdirError(
                f"the files of {root} add up to more than the server's cap of {size_text(max_unpacked)} unpacked{_largest(res)}"
            )
        with open(path, "rb") as f:
            tar.addfile(info, f)

    with open(out, "wb") as raw:
        capped = _Capped(raw, max_bytes)
        try:
            with (
                gzip.GzipFile(filename="", mode="wb", fileobj=capped, mtime=0) as gz,
                tarfile.open(fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar,
            ):
                for dirpath, dirnames, filenames in os.walk(root):
                    here = Path(dirpath)
                    base = here.relative_to(root).as_posix()
                    keep = []
                    for name in sorted(dirnames + filenames):
                        rel = name if base == "." else f"{base}/{name}"
                        path = here / name
                        st = path.lstat()
                        if stat.S_ISLNK(st.st_mode) or not (stat.S_ISDIR(st.st_mode) or stat.S_ISREG(st.st_mode)):
                            if not ignored(rel, False, patterns):
                                res.skipped.append(rel)
                            continue
                        if ignored(rel, stat.S_ISDIR(st.st_mode), patterns):
                            continue
                        add(tar, path, rel, st)
                        if stat.S_ISDIR(st.st_mode):
                            keep.append(name)
                    dirnames[:] = keep  # os.walk descends only into what was kept, in order
        except _Over:
            raise WorkdirError(
                f"the archive of {root} is over the server's cap of {size_text(max_bytes)}: it passed it after "
                f"{res.files} files ({size_text(res.file_bytes)} read); leave large files out with {IGNORE_FILE}"
                f"{_largest(res)}"
            ) from None
        except OSError as exc:
            raise WorkdirError(f"cannot pack {root}: {exc}") from None
    res.size, res.sha256 = capped.size, capped.hash.hexdigest()
    return res


def _largest(res: Packed) -> str:
    return "; largest: " + ", ".join(f"{rel} ({size_text(n)})" for n, rel in res.largest) if res.largest else ""


def ship(workdir: Path, quiet: bool) -> str:
    """Pack, check against the server's cap, upload (unless already there); the upload id."""
    from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TransferSpeedColumn

    api = client()
    limit = api.upload_limit()
    with tempfile.TemporaryDirectory(prefix="suanli-code-") as tmp:
        archive = Path(tmp) / "code.tar.gz"
        packed = pack(workdir, archive, int(limit["max_bytes"]), int(limit.get("max_unpacked_bytes") or 0) or None)
        if packed.skipped and not quiet:
            err_console.print(
                f"[yellow]note[/yellow]: left out {len(packed.skipped)} symlink(s)/special file(s): "
                f"{', '.join(packed.skipped[:10])}",
                highlight=False,
                soft_wrap=True,
            )
        if api.upload_info(packed.sha256):
            if not quiet:
                err_console.print(
                    f"code: {workdir} ({packed.files} files, {size_text(packed.size)}) already uploaded as {packed.sha256[:12]}",
                    highlight=False,
                    soft_wrap=True,
                )
            return packed.sha256
        progress = Progress(
            TextColumn("uploading {task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            console=err_console,
            transient=True,
            disable=quiet or not err_console.is_terminal,
        )
        with progress:
            bar = progress.add_task(workdir.name or str(workdir), total=packed.size)
            done = api.upload(archive, lambda sent, _total: progress.update(bar, completed=sent))
        if not quiet:
            err_console.print(
                f"code: uploaded {workdir} ({packed.files} files, {size_text(packed.size)}) as {done['id'][:12]}",
                highlight=False,
                soft_wrap=True,
            )
        return str(done["id"])


def _fail(kind: str, exc: Exception, code: int) -> typer.Exit:
    err_console.print(f"[red]error[/red] ({kind}): {exc}", highlight=False, soft_wrap=True)
    return typer.Exit(code)


def launch(
    task_file: Path = typer.Argument(..., exists=True, dir_okay=False, help="Task YAML, or a pipeline (a file with jobs:)."),
    name: str = typer.Option(None, help="Override the task's name (a pipeline's: its group's)."),
    env: list[str] = typer.Option([], "--env", help="KEY=VALUE, added to envs (repeatable; every job of a pipeline)."),
    secret: list[str] = typer.Option([], "--secret", help=secret_args.HELP + " Added to the task's secrets."),
    sweep: list[str] = typer.Option(
        [], "--sweep", help="KEY=V1,V2,...: one job per combination of the values (repeatable), each in its envs."
    ),
    wait: bool = typer.Option(False, "--wait", help="Wait for the job(s) to finish, print logs, exit with its code."),
    as_json: bool = typer.Option(False, "--json", help="Print the job as JSON (a pipeline or sweep: a list of jobs)."),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Quote the cost per hour (and for --hours); upload and submit nothing."
    ),
    hours: float = typer.Option(None, "--hours", help="With --dry-run: the job's maximum duration, for a total."),
) -> None:
    """Submit a job, a pipeline or a sweep; workdirs are uploaded, the scheduler queues and places them."""
    try:
        group, tasks, many = load_pipeline(task_file, parse_sweeps(sweep))
        workdirs = [workdir_of(task_file, t) for t in tasks]
    except WorkdirError as exc:
        raise _fail("workdir", exc, 2) from None
    except ValueError as exc:
        raise _fail("invalid", exc, 1) from None
    if dry_run:  # billing's quote (suanli.cli.billing); nothing is uploaded or submitted
        if many:
            raise _fail("invalid", ValueError("--dry-run quotes one task, not a pipeline or sweep"), 1)
        return quote_task(task_file, hours, 0, None, as_json)
    if name:
        if many:
            group = name
        else:
            tasks[0]["name"] = name
    extra_env = {}
    for item in env:
        key, sep, value = item.partition("=")
        if not sep:
            raise typer.BadParameter(f"expected KEY=VALUE, got {item!r}", param_hint="--env")
        extra_env[key] = value
    secrets = secret_args.parse(secret) if secret else {}
    for task in tasks:
        if extra_env:
            task["envs"] = {**(task.get("envs") or {}), **extra_env}
        if secrets:
            task["secrets"] = {**(task.get("secrets") or {}), **secrets}
    with api_errors():
        shipped: dict[Path, str] = {}
        for task, workdir in zip(tasks, workdirs, strict=True):
            if workdir is None:
                continue
            if workdir not in shipped:
                try:
                    shipped[workdir] = ship(workdir, as_json)
                except WorkdirError as exc:
                    raise _fail("workdir", exc, 2) from None
            task["code"], task["workdir"] = shipped[workdir], None
        jobs = client().launch_pipeline(tasks, group) if many else [client().launch(tasks[0])]
        if wait:
            jobs = [wait_for(j["id"]) for j in jobs]
            if not as_json:
                for j in jobs:
                    text = client().job_logs(j["id"])
                    typer.echo(f"==> job {j['id']} ({j['name']}) <==\n{text}" if many else text, nl=False)
    if as_json:
        print_json(jobs if many else jobs[0])
    else:
        show(jobs, False, "Jobs" if many else "Job")
    failed = [j for j in jobs if j["state"] != "succeeded"]
    if wait and failed:
        raise typer.Exit(failed[0]["exit_code"] or 1)

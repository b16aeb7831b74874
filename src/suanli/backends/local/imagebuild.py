"""Suanli's default images, built on this host from Debian packages.

In production an image is pulled from a registry. A host that reaches none (a lab
behind a firewall, CI, this project's own test machines) still needs a default
image on first start, so each built-in image is also a *recipe*: a root
filesystem assembled from Debian's packages and handed to the engine with
``podman import`` (or ``docker import``). Nothing here talks to a registry except
``pull_or_build``, which tries one briefly and falls back to the recipe.

- ``tiny``: Debian's static ``/bin/busybox`` with its applets; seconds to build,
  for tests and smoke checks.
- ``python``: ``debootstrap --variant=minbase`` of bookworm with Python 3.11, venv,
  pip, OpenSSH server and a few tools; about two minutes (less with the .deb cache).
- ``jupyter``: ``python`` plus JupyterLab from PyPI, built ``FROM`` the python image
  so the two share its layer.
- ``verify``: ``python`` plus this host's ``suanli`` package (the copy that builds it)
  and PyTorch, for ``suanli nodes verify NAME``: its job runs ``suanli verify --json``
  in the container a renter would get. torch is the host's version where it has one
  (found through ``$PIP_FIND_LINKS`` too, e.g. a CPU wheel), else the ``torch`` extra's
  ``torch==2.13.0`` from the index (CUDA-enabled on x86-64 Linux).

The engine binary is a parameter (``podman`` or ``docker``); everything goes through
its CLI, the same small surface the runtime adapter uses.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

Progress = Callable[[str], None]

#: where Debian's packages come from (``SUANLI_DEBIAN_MIRROR`` overrides)
DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEBIAN_SUITE = "bookworm"
#: what the python image installs on top of minbase: kept short, each one earns its place
PYTHON_PACKAGES = (
    "python3",
    "python3-venv",
    "python3-pip",  # the language, venvs, pip
    "openssh-server",
    "openssh-sftp-server",  # ssh, scp and sftp into the container
    "bash",
    "ca-certificates",
    "procps",
    "iproute2",
    "curl",  # a usable shell: ps/kill, ip, https
)
#: the limits every container this module runs must get on this machine kind (runc, no
#: CAP_SYS_RESOURCE: the engine must not raise rlimits); only ``podman build`` needs them here
PODMAN_RUN_FLAGS = ("--runtime", "runc", "--ulimit", "nofile=1024:1024", "--ulimit", "nproc=4096:4096")
#: files that must not be baked into an image: host keys would be shared by every
#: container (the runtime generates them at start, ``ssh-keygen -A``), the rest is bulk
PRUNE = (
    "etc/ssh/ssh_host_*",
    "etc/machine-id",
    "var/lib/dbus/machine-id",
    "var/cache/apt/archives/*.deb",
    "var/cache/apt/*.bin",
    "var/lib/apt/lists/*",
    "var/cache/debconf/*-old",
    "var/log/*.log",
    "var/log/apt/*",
    "usr/share/doc/*",
    "usr/share/man/*",
    "usr/share/info/*",
    "usr/share/locale/*",
    "usr/share/lintian/*",
    "usr/share/common-licenses/*",
)


class BuildError(RuntimeError):
    """A recipe could not be built; the message ends with the tool's last lines."""


@dataclass(frozen=True)
class Recipe:
    """One built-in image: its catalog entry and how to make it."""

    name: str
    ref: str
    description: str
    contents: dict
    builder: Callable[[Builder], None]
    #: seeded into an empty catalog at server start (``control.images.seed_defaults``)
    seeded: bool = True
    default: bool = False
    #: recipes whose image this one starts from
    needs: tuple[str, ...] = ()

    def pull_ref(self, registry: str | None) -> str | None:
        """Where a registry would hold it: ``REGISTRY/<name>:<tag>`` (tag of ``ref``)."""
        if not registry:
            return None
        repo = self.ref.rsplit("/", 1)[-1]  # "python:3.11"
        return f"{registry.rstrip('/')}/{repo}"


@dataclass
class BuildResult:
    name: str
    ref: str
    #: ``present`` (already there), ``pulled`` or ``built``
    how: str
    seconds: float
    log_tail: list[str] = field(default_factory=list)


@dataclass
class Builder:
    """What a recipe's build step gets: the engine, a scratch directory, progress."""

    engine: str
    work: Path
    progress: Progress
    #: the reference to build (the recipe's, or another tag for a test)
    ref: str
    cache_dir: Path | None = None
    tail: list[str] = field(default_factory=list)

    def run(self, argv: list[str], stdin_from: list[str] | None = None, cwd: Path | None = None) -> None:
        """Run ``argv`` (fed by ``stdin_from``'s stdout when given), each output line to
        ``progress``; a non-zero exit raises ``BuildError`` with the last lines."""
        self.progress("$ " + " ".join(argv) if not stdin_from else "$ " + " ".join(stdin_from) + " | " + " ".join(argv))
        feeder = None
        feeder_log = tempfile.TemporaryFile()  # the feeder's stderr, read once it ends (a pipe could fill and stall it)
        try:
            if stdin_from:
                feeder = subprocess.Popen(stdin_from, stdout=subprocess.PIPE, stderr=feeder_log, cwd=cwd)
            proc = subprocess.Popen(
                argv,
                stdin=feeder.stdout if feeder else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                text=True,
                errors="replace",
            )
        except FileNotFoundError as exc:
            feeder_log.close()
            raise BuildError(f"{exc.filename} is not installed (scripts/images installs the build tools)") from None
        if feeder and feeder.stdout:
            feeder.stdout.close()  # the consumer owns the pipe now
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip()
            if line:
                self.tail = (self.tail + [line])[-20:]
                self.progress(line)
        rc = proc.wait()
        feeder_rc, feeder_err = 0, ""
        if feeder:
            feeder_rc = feeder.wait()
            feeder_log.seek(0)
            feeder_err = feeder_log.read()[-2000:].decode(errors="replace").strip()
        feeder_log.close()
        if rc or feeder_rc:
            last = "\n".join(self.tail[-10:] + ([feeder_err] if feeder_err else []))
            raise BuildError(f"{argv[0]} failed (exit {rc or feeder_rc}):\n{last}")

    def import_rootfs(self, rootfs: Path, ref: str, recipe: Recipe, cmd: list[str], env: Iterable[str] = ()) -> None:
        """Tar ``rootfs`` (numeric owners, as root sees them) into ``ENGINE import``."""
        changes = [
            f"CMD {json.dumps(cmd)}",
            "WORKDIR /workspace",
            *(f"ENV {e}" for e in env),
            f"LABEL io.suanli.recipe={recipe.name}",
        ]
        argv = [self.engine, "import"]
        for c in changes:
            argv += ["--change", c]
        argv += ["-", ref]
        self.run(argv, stdin_from=["tar", "--numeric-owner", "-C", str(rootfs), "-c", "."])


# -- recipes ---------------------------------------------------------------------------


def _build_tiny(b: Builder) -> None:
    busybox = Path("/bin/busybox")
    if not busybox.is_file():
        raise BuildError("/bin/busybox is missing: install Debian's busybox-static (scripts/images does)")
    with busybox.open("rb") as f:
        head = f.read(16384)
    if b"ld-linux" in head:
        raise BuildError("/bin/busybox is dynamically linked: the tiny image needs busybox-static")
    root = b.work / "rootfs"
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "etc", "root", "tmp", "workspace", "proc", "sys", "dev", "var/tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    os.chmod(root / "tmp", 0o1777)
    os.chmod(root / "var/tmp", 0o1777)
    os.chmod(root / "root", 0o700)
    shutil.copy2(busybox, root / "bin/busybox")
    applets = subprocess.run([str(busybox), "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    for path in applets:  # e.g. "bin/sh", "usr/bin/env"
        link = root / path
        if path != "bin/busybox" and not link.exists():
            link.parent.mkdir(parents=True, exist_ok=True)
            link.symlink_to("/bin/busybox")
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n")
    (root / "etc/group").write_text("root:x:0:\nnogroup:x:65534:\n")
    (root / "etc/hostname").write_text("suanli\n")
    b.progress(f"tiny rootfs: busybox with {len(applets)} applets")
    b.import_rootfs(root, b.ref, RECIPES["tiny"], ["/bin/sh"])


def _prune(root: Path) -> None:
    for pattern in PRUNE:
        for p in root.glob(pattern):
            if p.is_dir() and not p.is_symlink():
                shutil.rmtree(p, ignore_errors=True)
            else:
                p.unlink(missing_ok=True)


def _build_python(b: Builder) -> None:
    if os.geteuid() != 0:
        raise BuildError("the python image is built with debootstrap, which needs root")
    root = b.work / "rootfs"
    argv = ["debootstrap", "--variant=minbase", "--include=" + ",".join(PYTHON_PACKAGES)]
    if b.cache_dir is not None:
        b.cache_dir.mkdir(parents=True, exist_ok=True)
        argv.append(f"--cache-dir={b.cache_dir.resolve()}")
    argv += [DEBIAN_SUITE, str(root), os.environ.get("SUANLI_DEBIAN_MIRROR", DEBIAN_MIRROR)]
    b.run(argv)
    _prune(root)
    # A container is the renter's own machine: let pip install into the system Python as
    # in the usual CUDA/PyTorch images (Debian's PEP 668 marker would refuse it).
    for marker in (root / "usr/lib").glob("python3*/EXTERNALLY-MANAGED"):
        marker.unlink()
    for d in ("workspace", "run/sshd"):
        (root / d).mkdir(parents=True, exist_ok=True)
    (root / "etc/machine-id").write_text("")
    b.progress(f"python rootfs: {_du_mib(root)} MiB after pruning")
    b.import_rootfs(root, b.ref, RECIPES["python"], ["/bin/bash"], env=["LANG=C.UTF-8"])


def _build_jupyter(b: Builder) -> None:
    _pip_image(b, "jupyter", "jupyterlab", "jupyter lab --version")


#: what ``suanli verify`` imports beyond the standard library (the CLI, NVML, the kernels)
VERIFY_REQUIREMENTS = ("typer", "rich", "numpy", "nvidia-ml-py", "torch")
#: the ``torch`` extra of pyproject.toml: used where this host has no torch to match
VERIFY_TORCH = "torch==2.13.0"
#: the image's ``suanli``: this package from /opt/suanli, nothing else of the server
VERIFY_ENTRY = '#!/usr/bin/python3\nimport sys\nsys.path.insert(0, "/opt/suanli")\nfrom suanli.cli import main\nmain()\n'


def verify_requirements() -> list[str]:
    """``VERIFY_REQUIREMENTS`` pinned to this host's versions (the container runs the
    same code as the server), torch to ``VERIFY_TORCH`` where the host has none."""
    from importlib import metadata

    out = []
    for name in VERIFY_REQUIREMENTS:
        try:
            out.append(f"{name}=={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            out.append(VERIFY_TORCH if name == "torch" else name)
    return out


def _build_verify(b: Builder) -> None:
    """This host's ``suanli`` package copied to /opt/suanli, a ``suanli`` command for it,
    and ``VERIFY_REQUIREMENTS`` from pip."""
    package = Path(__file__).resolve().parents[2]  # .../suanli (backends/local/imagebuild.py)
    shutil.copytree(package, b.work / "suanli", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    (b.work / "suanli-entry").write_text(VERIFY_ENTRY)
    _pip_image(
        b,
        "verify",
        " ".join(f"'{r}'" for r in verify_requirements()),
        "chmod 755 /usr/local/bin/suanli && suanli verify --help >/dev/null",
        copy="COPY suanli /opt/suanli/suanli\nCOPY suanli-entry /usr/local/bin/suanli\n",
        find_links=True,
    )


def _pip_image(b: Builder, name: str, install: str, check: str, copy: str = "", find_links: bool = False) -> None:
    """``FROM`` the python image, ``pip install`` then ``check``. The build may use the
    host's CA bundle (mounted, not baked in: hosts behind a TLS-inspecting proxy need it),
    ``$PIP_INDEX_URL`` (a mirror) and, with ``find_links``, the ``$PIP_FIND_LINKS``
    directories (e.g. a CPU wheel of torch), as the host's own pip does."""
    recipe, base = RECIPES[name], RECIPES["python"]
    podman = Path(b.engine).name == "podman"
    host_ca = Path(os.environ.get("PIP_CERT") or "/etc/ssl/certs/ca-certificates.crt")
    use_ca = podman and host_ca.is_file()
    links = [d for d in os.environ.get("PIP_FIND_LINKS", "").split() if Path(d).is_dir()] if find_links else []
    (b.work / "Containerfile").write_text(
        f"FROM {base.ref}\n"
        "ARG PIP_INDEX_URL\n"
        + ("ARG PIP_FIND_LINKS\n" if find_links else "")
        + copy
        + f"RUN {'PIP_CERT=/run/host-ca.crt ' if use_ca else ''}pip install --no-cache-dir {install} && {check}\n"
        'CMD ["/bin/bash"]\n'
        f"LABEL io.suanli.recipe={recipe.name}\n"
    )
    argv = [b.engine, "build", "--network", "host", "-t", b.ref]
    if podman:
        argv += list(PODMAN_RUN_FLAGS)
    if use_ca:
        argv += ["--volume", f"{host_ca.resolve()}:/run/host-ca.crt:ro"]
    for d in links:
        argv += ["--volume", f"{Path(d).resolve()}:{d}:ro"]
    if links:
        argv += ["--build-arg", f"PIP_FIND_LINKS={' '.join(links)}"]
    if os.environ.get("PIP_INDEX_URL"):
        argv += ["--build-arg", f"PIP_INDEX_URL={os.environ['PIP_INDEX_URL']}"]
    b.run(argv + [str(b.work)])


def _du_mib(root: Path) -> int:
    total = 0
    for dirpath, _dirs, files in os.walk(root):
        for f in files:
            try:
                total += os.lstat(os.path.join(dirpath, f)).st_size
            except OSError:
                pass
    return total // (1 << 20)


RECIPES: dict[str, Recipe] = {
    r.name: r
    for r in (
        Recipe(
            name="python",
            ref="localhost/suanli/python:3.11",
            default=True,
            builder=_build_python,
            description="Debian 12 with Python 3.11, venv and pip, OpenSSH server (ssh, scp, sftp), bash, curl",
            contents={"python": "3.11", "cuda": None, "jupyterlab": False, "sshd": True},
        ),
        Recipe(
            name="tiny",
            ref="localhost/suanli/tiny:1",
            builder=_build_tiny,
            description="BusyBox only (sh and the core utilities): a few MB, for tests and smoke checks",
            contents={"python": None, "cuda": None, "jupyterlab": False, "sshd": False},
        ),
        Recipe(
            name="verify",
            ref="localhost/suanli/verify:1",
            builder=_build_verify,
            seeded=False,
            needs=("python",),
            description="The python image plus suanli and PyTorch: `suanli nodes verify` runs `suanli verify` in it",
            contents={"python": "3.11", "cuda": None, "jupyterlab": False, "sshd": True},
        ),
        Recipe(
            name="jupyter",
            ref="localhost/suanli/jupyter:4",
            builder=_build_jupyter,
            seeded=False,
            needs=("python",),
            description="The python image plus JupyterLab 4 from PyPI",
            contents={"python": "3.11", "cuda": None, "jupyterlab": True, "sshd": True},
        ),
    )
}


# -- engine queries ----------------------------------------------------------------------


def detect_engine() -> str | None:
    """The engine binary this host has: ``$SUANLI_ENGINE``, else podman, else a docker
    whose daemon answers; None when there is none."""
    forced = os.environ.get("SUANLI_ENGINE")
    if forced:
        return forced if shutil.which(forced) else None
    if shutil.which("podman"):
        return "podman"
    if shutil.which("docker"):
        try:
            ok = (
                subprocess.run(
                    ["docker", "version", "--format", "{{.Server.Version}}"], capture_output=True, timeout=5
                ).returncode
                == 0
            )
        except (OSError, subprocess.TimeoutExpired):
            ok = False
        return "docker" if ok else None
    return None


def image_exists(ref: str, engine: str = "podman") -> bool:
    args = ["image", "exists", ref] if Path(engine).name == "podman" else ["image", "inspect", ref]
    try:
        return subprocess.run([engine, *args], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def local_refs(engine: str = "podman") -> set[str] | None:
    """Every ``repository:tag`` the engine holds, in one call (the image listing asks this
    once rather than once per catalog row); None when the engine does not answer."""
    try:
        out = subprocess.run(
            [engine, "images", "--format", "{{.Repository}}:{{.Tag}}"], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode:
        return None
    return {line.strip() for line in out.stdout.splitlines() if line.strip()}


# -- entry points --------------------------------------------------------------------------


def recipe(name: str) -> Recipe:
    try:
        return RECIPES[name]
    except KeyError:
        raise KeyError(f"no recipe {name!r}; recipes: {', '.join(sorted(RECIPES))}") from None


def build(
    name: str,
    engine: str = "podman",
    progress: Progress = lambda _l: None,
    cache_dir: Path | None = None,
    work_dir: Path | None = None,
    force: bool = False,
    ref: str | None = None,
) -> BuildResult:
    """Build recipe ``name`` (and the recipes it starts from, when missing) unless the
    engine already has it; ``force`` rebuilds (and drops the image it replaces when no
    container uses it). ``ref`` tags it otherwise than the recipe does (tests). Progress
    lines go to ``progress``, ending with the total time."""
    r = recipe(name)
    ref = ref or r.ref
    start = time.monotonic()
    old_id = _image_id(ref, engine)
    if old_id and not force:
        return BuildResult(name, ref, "present", time.monotonic() - start)
    for dep in r.needs:
        build(dep, engine, progress, cache_dir, work_dir)
    progress(f"building {ref} ({name}) with {engine}")
    work = Path(tempfile.mkdtemp(prefix=f"suanli-image-{name}-", dir=work_dir))
    b = Builder(engine=engine, work=work, progress=progress, ref=ref, cache_dir=cache_dir)
    try:
        r.builder(b)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if old_id and old_id != _image_id(ref, engine):
        subprocess.run([engine, "rmi", old_id], capture_output=True)  # refused (kept) while a container uses it
    seconds = time.monotonic() - start
    progress(f"built {ref} in {seconds:.1f} s")
    return BuildResult(name, ref, "built", seconds, b.tail)


def _image_id(ref: str, engine: str) -> str | None:
    try:
        out = subprocess.run([engine, "image", "inspect", "--format", "{{.Id}}", ref], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode:
        return None
    return out.stdout.strip() or None


def registry_answers(registry: str, timeout_s: float = 10.0) -> bool:
    """Whether the registry's host (the first part of ``registry``) answers the
    distribution API (``/v2/`` gives 200, or 401 asking for a token) within ``timeout_s``.
    Asked before a pull so that a host that reaches no registry fails in seconds, while a
    pull that has started may take the minutes a large image needs."""
    host = registry.split("/", 1)[0]
    host = "registry-1.docker.io" if host == "docker.io" else host
    deadline = time.monotonic() + timeout_s
    for scheme in ("https", "http"):
        left = deadline - time.monotonic()
        if left <= 0:
            break
        try:
            urllib.request.urlopen(f"{scheme}://{host}/v2/", timeout=left).close()
            return True
        except urllib.error.HTTPError as exc:  # 401: a registry asking for a token
            if exc.code == 401:
                return True
        except (OSError, ValueError):
            continue
    return False


def _pull(src: str, ref: str, engine: str, progress: Progress, timeout_s: float = 3600.0) -> bool:
    """``ENGINE pull SRC`` with its output as progress, then tag it ``ref``."""
    progress(f"$ {engine} pull {src}")
    try:
        proc = subprocess.Popen(
            [engine, "pull", src],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            text=True,
            errors="replace",
        )
    except OSError as exc:
        progress(f"cannot run {engine}: {exc}")
        return False
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    for line in proc.stdout:
        if line.strip():
            progress(line.rstrip())
        if time.monotonic() > deadline:
            proc.kill()
    if proc.wait():
        progress(f"{engine} pull {src} failed (exit {proc.returncode})")
        return False
    if src != ref and subprocess.run([engine, "tag", src, ref], capture_output=True).returncode:
        progress(f"pulled {src} but could not tag it {ref}")
        return False
    return True


def pull(
    name: str,
    registry: str,
    engine: str = "podman",
    progress: Progress = lambda _l: None,
    timeout_s: float = 10.0,
    ref: str | None = None,
) -> bool:
    """``ENGINE pull REGISTRY/<repo>:<tag>`` and tag it as the recipe's local ref (or
    ``ref``); False, within ``timeout_s``, when the registry does not answer."""
    r = recipe(name)
    src = r.pull_ref(registry)
    assert src
    if not registry_answers(registry, timeout_s):
        progress(f"no answer from {registry.split('/', 1)[0]} within {timeout_s:g} s")
        return False
    return _pull(src, ref or r.ref, engine, progress)


def pull_or_build(
    name: str,
    engine: str = "podman",
    progress: Progress = lambda _l: None,
    registry: str | None = None,
    pull_timeout_s: float = 10.0,
    cache_dir: Path | None = None,
    work_dir: Path | None = None,
    ref: str | None = None,
) -> BuildResult:
    """Make image ``name`` present: nothing when the engine has it; for a built-in recipe,
    a pull where a registry (``registry`` or ``$SUANLI_IMAGE_REGISTRY``, e.g.
    ``registry.example.com/suanli``) answers within ``pull_timeout_s``, else a local build;
    for any other catalog image, a pull of its ``ref`` (``BuildError`` if that fails)."""
    start = time.monotonic()
    if name not in RECIPES:
        if not ref:
            raise BuildError(f"{name!r} is no built-in recipe ({', '.join(RECIPES)}); give its ref to pull")
        if image_exists(ref, engine):
            return BuildResult(name, ref, "present", time.monotonic() - start)
        if not _pull(ref, ref, engine, progress):
            raise BuildError(f"cannot pull {ref}, and {name!r} is no built-in recipe to build here")
        return BuildResult(name, ref, "pulled", time.monotonic() - start)
    r = recipe(name)
    ref = ref or r.ref
    if image_exists(ref, engine):
        return BuildResult(name, ref, "present", time.monotonic() - start)
    registry = registry or os.environ.get("SUANLI_IMAGE_REGISTRY") or None
    if registry and pull(name, registry, engine, progress, pull_timeout_s, ref):
        seconds = time.monotonic() - start
        progress(f"pulled {ref} in {seconds:.1f} s")
        return BuildResult(name, ref, "pulled", seconds)
    if registry:
        progress(f"building {name} locally instead")
    result = build(name, engine, progress, cache_dir, work_dir, ref=ref)
    result.seconds = time.monotonic() - start
    return result

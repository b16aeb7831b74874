"""Build the sbatch command line and batch script for one Suanli allocation (pure, no I/O).

Suanli's scheduler decides where work runs; Slurm executes and enforces. So every job is
pinned: ``--nodelist`` names the node Suanli chose, ``--gres=gpu:TYPE:N`` asks for its
whole GPUs, or ``--gres=shard:TYPE:K`` for a fraction of one GPU (K shards of the node's
shards-per-GPU; the test cluster cuts each GPU into 10, i.e. 0.1 GPU steps). Slurm picks
the GPU indices inside the node and sets CUDA_VISIBLE_DEVICES; the backend reads them back
from ``squeue`` (``SlurmJob.gpu_indices``), so the allocation records what the job sees.

The batch script is a small wrapper rather than the workload itself, because Slurm's
notice signals (``--signal=B:USR1@T``, ``scancel --batch``) reach only the batch shell:
the wrapper forwards USR1 and TERM to the workload's process group, writes the notice deadline to
``$SUANLI_PREEMPT_DEADLINE_FILE`` when USR1 arrives, and exits with the workload's status.
A job with a notice period always sees USR1 before TERM, even when Slurm's preemption
(GraceTime=0) sends both at once.
The job's environment is built from scratch (``--export=NONE``) so nothing from the Suanli
server process (tokens, database URLs) leaks into tenants' jobs.

With ``engine`` set, the command starts the workload as a container of that engine (see
``container.py``) and the wrapper adapts: signals go to the container with ``ENGINE kill``
(the container's own wrapper passes them to the workload), and only once it runs (until
then they wait, in order); and the container never outlives the job: ``--rm``, an EXIT
trap that removes whatever container this run left, and a guard outside the job's process
tree that does the same when Slurm KILLs the batch shell (after ``KillWait``), which no trap
survives. The command must create its container with ``--cidfile "$SUANLI_CIDFILE"`` and
``--label suanli.slurm_run=$SUANLI_RUN_ID``: that is how the wrapper finds it.
"""

from __future__ import annotations

import math
import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Variables Slurm sets for the allocation; a caller setting them would lie to the job.
RESERVED_ENV = frozenset({"CUDA_VISIBLE_DEVICES", "SLURM_JOB_ID", "SLURM_RESTART_COUNT"})


class SbatchSpecError(ValueError):
    """The request cannot be expressed as a pinned sbatch job."""


@dataclass(frozen=True)
class SbatchSpec:
    """One allocation as Suanli placed it, to run as a Slurm batch job.

    Exactly one of ``gpu_count`` (whole GPUs) and ``shards`` (a fraction of one GPU) may be
    non-zero; both zero is a CPU-only job. ``notice_s`` asks Slurm for ``SIGUSR1`` that
    many seconds before the time limit and at preemption (spot jobs); ``comment`` tags the
    job (e.g. ``suanli:alloc=42``) so a restarted server can re-adopt it by id or tag.
    """

    name: str
    command: str
    node: str
    gpu_type: str | None = None
    gpu_count: int = 0
    shards: int = 0
    cpus: int = 1
    memory_mb: int | None = None
    partition: str | None = None
    qos: str | None = None
    requeue: bool = False
    notice_s: int | None = None
    time_limit_s: int | None = None
    env: Mapping[str, str] = field(default_factory=dict)
    output: str | None = None
    workdir: str | None = None
    comment: str | None = None
    #: the container engine (``podman``) the command runs the workload with; None: a host process
    engine: str | None = None

    def __post_init__(self) -> None:
        if not self.name or any(c.isspace() for c in self.name):
            raise SbatchSpecError(f"job name must be one word, got {self.name!r}")
        if not self.node or "," in self.node or "[" in self.node:
            raise SbatchSpecError(f"an allocation is pinned to exactly one node, got {self.node!r}")
        if self.gpu_count < 0 or self.shards < 0 or self.cpus < 1:
            raise SbatchSpecError("gpu_count and shards must be >= 0 and cpus >= 1")
        if self.gpu_count and self.shards:
            raise SbatchSpecError("ask for whole GPUs or shards of one GPU, not both")
        if self.notice_s is not None and self.notice_s < 0:
            raise SbatchSpecError("notice_s must be >= 0")
        if self.engine is not None and (not self.engine or any(c.isspace() or c in "'\"$;&|" for c in self.engine)):
            raise SbatchSpecError(f"bad container engine {self.engine!r}")
        bad = RESERVED_ENV & set(self.env)
        if bad:
            raise SbatchSpecError(f"{sorted(bad)} are set by Slurm for the allocation; do not pass them")
        for key in self.env:
            if not key.replace("_", "a").isalnum() or key[0].isdigit():
                raise SbatchSpecError(f"bad environment variable name {key!r}")

    @property
    def gres(self) -> str | None:
        """The ``--gres`` value: ``gpu:h100:2``, ``shard:h100:5``, or None."""
        typed = f"{self.gpu_type}:" if self.gpu_type else ""
        if self.gpu_count:
            return f"gpu:{typed}{self.gpu_count}"
        if self.shards:
            return f"shard:{typed}{self.shards}"
        return None


def shards_for_milli(gpu_milli: int, shards_per_gpu: int) -> int:
    """Shards that cover ``gpu_milli`` thousandths of a GPU, rounded up (never zero).

    With 10 shards per GPU, 250 milli-GPU -> 3 shards (0.3 GPU): a tenant never gets less
    than it pays for.
    """
    if not 0 < gpu_milli < 1000:
        raise SbatchSpecError(f"a fractional request is 1..999 milli-GPU, got {gpu_milli}")
    if shards_per_gpu < 1:
        raise SbatchSpecError("this node does not share GPUs (no shards configured)")
    return max(1, math.ceil(gpu_milli * shards_per_gpu / 1000))


def format_duration(seconds: int) -> str:
    """Seconds -> Slurm's ``D-HH:MM:SS`` (whole minutes are not required)."""
    days, rest = divmod(max(0, seconds), 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{days}-{hours:02d}:{minutes:02d}:{secs:02d}"


def sbatch_args(spec: SbatchSpec) -> list[str]:
    """The sbatch command line; the script goes on standard input (see ``render_script``)."""
    args = [
        "sbatch",
        "--parsable",
        f"--job-name={spec.name}",
        f"--nodelist={spec.node}",
        "--nodes=1",
        "--ntasks=1",
        f"--cpus-per-task={spec.cpus}",
        "--export=NONE",
    ]
    if spec.gres:
        args.append(f"--gres={spec.gres}")
    if spec.memory_mb is not None:
        args.append(f"--mem={spec.memory_mb}M")
    if spec.partition:
        args.append(f"--partition={spec.partition}")
    if spec.qos:
        args.append(f"--qos={spec.qos}")
    args.append("--requeue" if spec.requeue else "--no-requeue")
    if spec.notice_s is not None:
        args.append(f"--signal=B:USR1@{spec.notice_s}")
    if spec.time_limit_s is not None:
        args.append(f"--time={format_duration(spec.time_limit_s)}")
    if spec.output:
        # append: a requeued job's earlier runs stay in its log
        args += [f"--output={spec.output}", "--open-mode=append"]
    if spec.workdir:
        args.append(f"--chdir={spec.workdir}")
    if spec.comment:
        args.append(f"--comment={spec.comment}")
    return args


#: Seconds between the USR1 and the TERM the wrapper passes on when TERM comes without a
#: notice first (Slurm preemption with GraceTime=0, a plain scancel).
NOTICE_GAP_S = 1


def render_script(spec: SbatchSpec) -> str:
    """The batch script: environment, then the workload under a signal-forwarding wrapper."""
    env = {"PATH": DEFAULT_PATH, **spec.env}
    if spec.notice_s is not None:
        env.setdefault("SUANLI_NOTICE_S", str(spec.notice_s))
    head = [
        "#!/bin/bash",
        f"# generated by suanli: job {spec.name} on {spec.node}, gres {spec.gres or 'none'}"
        + (f", in a {spec.engine} container" if spec.engine else ""),
        *(f"export {k}={shlex.quote(v)}" for k, v in sorted(env.items())),
        'export SUANLI_RESTART_COUNT="${SLURM_RESTART_COUNT:-0}"',
        'export SUANLI_GPU_INDICES="${CUDA_VISIBLE_DEVICES:-}"',
    ]
    return "\n".join(head + (_container_wrapper(spec) if spec.engine else _process_wrapper(spec)) + [""])


def _handlers(pass_fn: list[str]) -> list[str]:
    """USR1/TERM handlers shared by both wrappers; ``pass_fn`` defines ``suanli_pass SIG``."""
    return [
        # no forks in the handlers: a TERM arriving meanwhile would overtake the notice;
        # a signal that comes before the workload's pid is known is passed on right after
        "child='' notified=0 pending=''",
        *pass_fn,
        "suanli_notice() {  # USR1: the spot notice; record the deadline, pass it on",
        "  notified=1",
        "  printf -v now '%(%s)T' -1",
        "  deadline=$(( now + ${SUANLI_NOTICE_S:-0} ))",
        '  [ -n "${SUANLI_PREEMPT_DEADLINE_FILE:-}" ] && echo "$deadline" >"$SUANLI_PREEMPT_DEADLINE_FILE"',
        "  suanli_pass USR1",
        '  echo "suanli: notice received, deadline $deadline" >&2',
        "}",
        "suanli_term() {  # TERM: a job with a notice period always hears the notice first",
        '  if [ -n "${SUANLI_NOTICE_S:-}" ] && [ "$notified" = 0 ]; then',
        "    suanli_notice",
        # both at once, bash may run the workload's TERM trap (exit) before its USR1 trap:
        # give it NOTICE_GAP_S to start on the notice (a fork-free sleep on a silent pipe)
        f'    read -r -t {NOTICE_GAP_S} -u "$suanli_quiet" _',
        "  fi",
        "  suanli_pass TERM",
        "}",
        "exec {suanli_quiet}<> <(:)",
        "trap suanli_notice USR1",
        "trap suanli_term TERM",
    ]


#: Waits for the workload; the script's exit status is the workload's.
_WAIT = [
    "# wait returns early when a trapped signal arrives; keep waiting for the workload",
    'while kill -0 "$child" 2>/dev/null; do wait "$child"; done',
    'wait "$child"',
]


def _process_wrapper(spec: SbatchSpec) -> list[str]:
    pass_fn = [
        "suanli_pass() {",
        '  if [ -n "$child" ]; then kill -"$1" -- -"$child" 2>/dev/null; else pending="$pending $1"; fi',
        "}",
    ]
    return [
        *_handlers(pass_fn),
        # the workload in its own process group, so a forwarded signal reaches all of it
        # (a Python trainer under a shell included) exactly once, like a local task's group
        "set -m",
        f"/bin/bash -c {shlex.quote(spec.command)} &",
        "child=$!",
        "set +m",
        "for sig in $pending; do",
        f'  [ "$sig" = TERM ] && [ "$notified" = 1 ] && read -r -t {NOTICE_GAP_S} -u "$suanli_quiet" _',
        '  kill -"$sig" -- -"$child" 2>/dev/null',
        "done",
        *_WAIT,
    ]


#: Seconds the batch shell's EXIT trap gives a container still running when the engine's
#: client is gone, before KILL (Slurm KILLs the shell after KillWait; the guard then KILLs).
CLEANUP_GRACE_S = 10


def _container_wrapper(spec: SbatchSpec) -> list[str]:
    eng = spec.engine
    assert eng is not None
    # remove this run's container: TERM, KILL after $2 s (--rm has done it when the workload ended)
    sweep = f'{eng} ps -aq --filter "label=suanli.slurm_run=$1" | xargs -r {eng} rm -f -i -t "$2" >/dev/null 2>&1'
    guard = (  # outlives a KILLed batch shell: runs outside the job's process tree, ignores its signals
        f'trap "" TERM INT HUP USR1; while kill -0 "$3" 2>/dev/null; do sleep 1; done; {sweep}; rm -f "$4"'
    )
    pass_fn = [
        "ready=''",
        "suanli_pass() {  # to the container's init, which forwards it to the workload",
        f'  if [ -n "$ready" ]; then {eng} kill --signal "$1" "$(<"$SUANLI_CIDFILE")" >/dev/null 2>&1; '
        'else pending="$pending $1"; fi',
        "}",
    ]
    return [
        'export SUANLI_RUN_ID="${SLURM_JOB_ID:-0}.$SUANLI_RESTART_COUNT"',
        'export SUANLI_CIDFILE="/tmp/suanli-$SUANLI_RUN_ID.cid"',
        'rm -f "$SUANLI_CIDFILE"',
        *_handlers(pass_fn),
        "suanli_up() {  # the container has left 'created': a signal now has a target (or none is left)",
        '  [ -s "$SUANLI_CIDFILE" ] || return 1',
        f'  case "$({eng} inspect --format \'{{{{.State.Status}}}}\' "$(<"$SUANLI_CIDFILE")" 2>/dev/null)" in',
        "    created|configured|initialized) return 1 ;;",
        "  esac",
        "}",
        "suanli_cleanup() {  # no container outlives its job, whatever ended it",
        "  local rc=$?",
        # the engine died before its container (a signal race): the workload still gets a grace period
        f'  set -- "$SUANLI_RUN_ID" {CLEANUP_GRACE_S}; {sweep}',
        '  rm -f "$SUANLI_CIDFILE"',
        '  exit "$rc"',
        "}",
        f'( setsid /bin/bash -c {shlex.quote(guard)} suanli-guard "$SUANLI_RUN_ID" 0 $$ "$SUANLI_CIDFILE" '
        "</dev/null >/dev/null 2>&1 & )",
        "trap suanli_cleanup EXIT",
        "set -m",
        f"/bin/bash -c {shlex.quote(spec.command)} &",
        "child=$!",
        "set +m",
        # until the container runs, signals wait in $pending (in order), then go to it
        'while ! suanli_up && kill -0 "$child" 2>/dev/null; do read -r -t 0.1 -u "$suanli_quiet" _; done',
        "ready=1",
        "for sig in $pending; do",
        f'  [ "$sig" = TERM ] && [ "$notified" = 1 ] && read -r -t {NOTICE_GAP_S} -u "$suanli_quiet" _',
        '  suanli_pass "$sig"',
        "done",
        *_WAIT,
    ]

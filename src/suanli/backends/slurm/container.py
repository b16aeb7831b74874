"""The Slurm backend's container mode: the local runtime's container, started on the node.

Where a task has an image and the backend runs containers, the batch script's workload is
``podman run`` of that image on the node Slurm allocated, with what a local container gets
(``backends/local/container_runtime``), so a workload cannot tell the two apart:

- the same wrapper (``task.sh`` under ``--init``: setup, then run, in a session of its
  own; USR1 and TERM forwarded to the whole workload) and the same files: the task
  directory read-only at ``/run/suanli`` (``env.sh``, scripts, the spot deadline that the
  batch wrapper writes), the volume at ``/workspace``;
- the GPUs Slurm gave the job: for GPUs with NVIDIA's CDI spec on the node, the CDI devices
  of exactly those indices (renumbered from 0 inside, as a container sees them); for the
  virtual GPUs of a test cluster (typed GRES on dummy devices), ``CUDA_VISIBLE_DEVICES`` as
  Slurm set it. Which one is decided per backend (``gpu_access``) and said in the handle;
  a CDI job on a node without the spec fails with the reason rather than run without GPUs;
- CPU, memory (no swap), pids and ``/dev/shm`` limits of the allocation; no privileges;
  the tenant's network on the node (isolated from other tenants' and, where ``iptables``
  is there, from the node's own services), or the host's network for a job of several nodes,
  whose ranks must reach each other across nodes.

Everything that depends on the node (Slurm's GPU indices, the job id, the engine) is read
there, by the batch script: the server only writes files on the shared task directory.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from suanli.backends.base import TaskSpec
from suanli.backends.local.container_runtime import MOUNT, RUN_PREAMBLE, WORKSPACE, WRAPPER, limit_args
from suanli.backends.local.engine import HOST_LOCK, EngineFacts
from suanli.backends.local.firewall import COMMENT

#: Set by Slurm or the batch script on the node, passed into the container at start; never
#: taken from the control plane's environment (``env.sh`` would override them).
NODE_ENV = (
    "CUDA_VISIBLE_DEVICES",
    "SUANLI_GPU_INDICES",
    "SUANLI_RESTART_COUNT",
    "SLURM_JOB_ID",
    "SLURM_RESTART_COUNT",
    "SLURMD_NODENAME",
    "SLURM_CPUS_PER_TASK",
)
GPU_ACCESS = ("cdi", "virtual")

#: ``podman exec`` script: the task's environment, its working directory, the spot deadline
#: when there is one, and a time limit (as the local runtime's exec).
EXEC_SCRIPT = (
    f'. {MOUNT}/env.sh; cd "$SUANLI_CWD" 2>/dev/null; '
    f"if [ -s {MOUNT}/preempt_deadline ]; then export SUANLI_PREEMPT_DEADLINE=$(cat {MOUNT}/preempt_deadline); fi; "
    'if command -v timeout >/dev/null 2>&1; then exec timeout -s KILL "$2" sh -c "$1"; else exec sh -c "$1"; fi'
)


@dataclass(frozen=True)
class SlurmContainers:
    """How one Slurm backend runs its tasks' containers (the same on every node)."""

    prefix: str  #: names of containers and networks: ``<prefix>-<key>``, ``<prefix>-t<tenant>``
    tag: str  #: the backend's job tag prefix, as label ``suanli.tag`` of its containers and networks
    gpu_access: str = "virtual"
    engine: str = "podman"
    pids_limit: int = 4096
    pull: str = "missing"  #: ``--pull``: registries answer in production; ``never`` where none does

    def __post_init__(self) -> None:
        if self.gpu_access not in GPU_ACCESS:
            raise ValueError(f"gpu_access must be one of {GPU_ACCESS}, got {self.gpu_access!r}")

    def name(self, key: str) -> str:
        return f"{self.prefix}-{key}"

    def network(self, spec: TaskSpec) -> str:
        multi = int(spec.env.get("SUANLI_NUM_NODES", "1") or 1) > 1
        return "host" if multi else f"{self.prefix}-t{spec.tenant_id}"

    def environment(self, spec: TaskSpec) -> dict[str, str]:
        """``env.sh``: what the control plane gave, with the container's own paths."""
        env = {k: v for k, v in spec.env.items() if k not in NODE_ENV and k != "ASCEND_RT_VISIBLE_DEVICES"}
        cwd = f"{WORKSPACE}/{spec.cwd}".rstrip("/") if spec.cwd else WORKSPACE
        env.update({k: f"{WORKSPACE}/{v}".rstrip("/") for k, v in spec.volume_env.items()})
        env.update(
            {
                "SUANLI_RUNTIME": "container",
                "SUANLI_WORKDIR": WORKSPACE,
                "SUANLI_CWD": cwd,
                "SUANLI_TASK_DIR": MOUNT,
                "SUANLI_PREEMPT_DEADLINE_FILE": f"{MOUNT}/preempt_deadline",
                "HOME": env.get("HOME", "/root"),
            }
        )
        if self.network(spec) != "host" and "MASTER_ADDR" in env:
            env["MASTER_ADDR"] = "127.0.0.1"  # every rank of a one-node job is in this container
        return env

    def files(self, spec: TaskSpec) -> dict[str, tuple[str, int]]:
        """Task-directory files (name -> text, mode) the container reads at ``/run/suanli``."""
        env = self.environment(spec)
        return {
            "env.sh": ("".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()), 0o600),
            "setup.sh": (spec.setup + "\n" if spec.setup else "", 0o600),
            "run.sh": (RUN_PREAMBLE + spec.run + "\n", 0o600),
            "task.sh": (WRAPPER.format(key=spec.key, mount=MOUNT), 0o600),
        }

    def run_args(self, spec: TaskSpec, tdir: str, volume: str, cpus: int) -> list[str]:
        """Everything of ``ENGINE run`` that the server knows (the node adds GPUs and ids)."""
        facts = EngineFacts(self.engine) if self.engine == "podman" else EngineFacts(self.engine, oci_runtime=None)
        engine_args = (["--runtime", facts.oci_runtime] if facts.oci_runtime else []) + [
            a for u in facts.ulimits for a in ("--ulimit", u)
        ]
        return [
            "--rm",
            "--replace",
            "--name",
            self.name(spec.key),
            "--hostname",
            spec.key,
            "--init",
            "--pull",
            self.pull,
            "--label",
            f"suanli.tag={self.tag}",
            "--label",
            f"suanli.key={spec.key}",
            "--label",
            f"suanli.tenant={spec.tenant_id}",
            *engine_args,
            "--network",
            self.network(spec),
            *limit_args(spec.cpu_milli or cpus * 1000, spec.memory_mib, self.pids_limit),
            "--security-opt",
            "no-new-privileges",
            "--cap-drop",
            "NET_RAW",
            "--cap-drop",
            "MKNOD",
            "--cap-drop",
            "AUDIT_WRITE",
            "-v",
            f"{volume}:{WORKSPACE}",
            "-v",
            f"{tdir}:{MOUNT}:ro",
        ]

    def command(self, spec: TaskSpec, tdir: str, volume: str, cpus: int) -> str:
        """The batch script's workload (bash, run on the node): the tenant's network, the
        GPUs Slurm gave, then ``exec ENGINE run``, whose exit status is the workload's."""
        eng, net = shlex.quote(self.engine), self.network(spec)
        static = " ".join(shlex.quote(a) for a in self.run_args(spec, tdir, volume, cpus))
        lines = [f"# the workload as container {self.name(spec.key)} of {spec.image}"]
        if net != "host":
            q = shlex.quote(net)
            rule = f'-i "$iface" -m comment --comment {shlex.quote(COMMENT)}'
            lock = shlex.quote(str(HOST_LOCK))
            lines += [
                f"exec 9>>{lock} && flock 9  # networks are made one at a time on a host (engine.ensure_network)",
                f"{eng} network exists {q} || {eng} network create --opt isolate=true --disable-dns "
                f"--label suanli.tag={shlex.quote(self.tag)} {q} >/dev/null 2>&1 || {eng} network exists {q} || "
                f'{{ echo "[suanli] cannot create network {net} on ${{SLURMD_NODENAME:-this node}}" >&2; exit 125; }}',
                "if command -v iptables >/dev/null 2>&1; then  # keep the node's own services out of reach",
                f"  iface=$({eng} network inspect --format '{{{{.NetworkInterface}}}}' {q} 2>/dev/null)",
                f'  [ -n "$iface" ] && ! iptables -w 5 -C INPUT {rule} -j DROP 2>/dev/null && {{',
                f"    iptables -w 5 -I INPUT 1 {rule} -j DROP &&",
                f"    iptables -w 5 -I INPUT 1 {rule} -m conntrack --ctstate ESTABLISHED,RELATED -j ACCEPT ||",
                f'    echo "[suanli] warning: the node\'s services are not firewalled from network {net}" >&2; }}',
                "fi",
                "flock -u 9; exec 9>&-",
            ]
        lines.append("gpus=()")
        if self.gpu_access == "cdi":
            lines += [
                'if [ -n "${CUDA_VISIBLE_DEVICES:-}" ]; then',
                "  compgen -G '/etc/cdi/nvidia*' >/dev/null || compgen -G '/var/run/cdi/nvidia*' >/dev/null || "
                '{ echo "[suanli] no NVIDIA CDI spec on ${SLURMD_NODENAME:-this node} (nvidia-ctk cdi generate)" >&2; exit 125; }',
                '  IFS=, read -ra idx <<<"$CUDA_VISIBLE_DEVICES"; seq=""',
                '  for i in "${!idx[@]}"; do gpus+=(--device "nvidia.com/gpu=${idx[i]}"); seq="${seq:+$seq,}$i"; done',
                "  export CUDA_VISIBLE_DEVICES=$seq",
                "fi",
            ]
        lines += [
            "envs=()",
            f'for n in {" ".join(NODE_ENV)}; do [ -n "${{!n+x}}" ] && envs+=(-e "$n=${{!n}}"); done',
            # the task's secrets: exported by the batch script, taken from there by name (no value in argv)
            *([f"envs+=({' '.join(f'-e {k}' for k in sorted(spec.secrets))})"] if spec.secrets else []),
            f'exec {eng} run --cidfile "$SUANLI_CIDFILE" --label "suanli.slurm_run=$SUANLI_RUN_ID" '
            f'--label "suanli.slurm_job=${{SLURM_JOB_ID:-}}" {static} "${{gpus[@]}}" "${{envs[@]}}" '
            f"{shlex.quote(spec.image)} sh {MOUNT}/task.sh",
        ]
        return "\n".join(lines)

    def exec_argv(self, key: str, command: str, timeout_s: float) -> list[str]:
        """``ENGINE exec`` into the task's container (run on its node as a Slurm step)."""
        return [self.engine, "exec", self.name(key), "sh", "-c", EXEC_SCRIPT, "suanli-exec", command, str(max(1, int(timeout_s)))]

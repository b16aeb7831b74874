"""Slurm backend benchmark: submit-to-running, failover and reclaim notice, on real daemons.

Needs the one-host cluster of ``scripts/slurm-cluster`` (root, Debian packages):

    sudo scripts/slurm-cluster start && eval "$(scripts/slurm-cluster env)"
    .venv/bin/python bench/slurm_latency.py --rounds 5 --json bench/results/slurm_latency.jsonl

What it measures (every time is taken by the workload itself, ``date +%s.%N``, so the
figure does not include the benchmark's own polling):

- **submit -> running**: plain ``sbatch`` of a pinned 1-GPU job against the same job
  submitted through Suanli (database row, scheduling pass, launch = sbatch), alternated
  in the same run. The control loop is ticked continuously, as a woken server loop is.
- **failover**: a checkpointing job's node goes down (Slurm: ``scontrol update
  state=down``; local: the node marked down) -> the job running on another node from
  its checkpoint. Target <= 5 s on both backends. Also on the local backend with
  heartbeats: the node's agent falls silent -> running elsewhere, which includes the
  heartbeat timeout (``--heartbeat-timeout``, here 2 s; the server default is 15 s).
- **reclaim**: a spot job is reclaimed by an on-demand job; the notice (USR1) must reach
  the workload before TERM in every round; the lead time is reported.

The platform is driven the way the tests drive it (``tests/platform_helpers.py``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from suanli.backends.local import LocalBackend  # noqa: E402
from suanli.backends.slurm import SbatchSpec, SlurmBackend, SlurmClient  # noqa: E402
from suanli.control import nodes  # noqa: E402
from suanli.inventory import Inventory, NodeDecl  # noqa: E402
from tests.platform_helpers import ADMIN, Platform, make_platform  # noqa: E402

WORKLOAD = (
    'ckpt="$SUANLI_CHECKPOINT_DIR/step"; log="$SUANLI_CHECKPOINT_DIR/log"; step=$(cat "$ckpt" 2>/dev/null || echo 0); '
    'echo "start at=$(date +%s.%N) from=$step node=${SLURMD_NODENAME:-$SUANLI_NODE_NAME}" >> "$log"; '
    'trap \'echo "$step" > "$ckpt"; echo "USR1 at=$(date +%s.%N)" >> "$log"\' USR1; '
    'trap \'echo "TERM at=$(date +%s.%N)" >> "$log"; exit 0\' TERM; '
    'while true; do step=$((step + 1)); [ $((step % 3)) = 0 ] && echo "$step" > "$ckpt"; sleep 0.1; done'
)


def wait(probe, timeout_s: float, what: str, tick=None):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout_s
    while True:
        if tick is not None:
            tick()
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.02)


def lines(p: Platform, job_id: int, prefix: str) -> list[float]:
    path = p.data_dir / "checkpoints" / f"job-{job_id}" / "ckpt" / "log"
    text = path.read_text() if path.exists() else ""
    return [float(x.split("at=")[1].split()[0]) for x in text.splitlines() if x.startswith(prefix)]


def slurm_platform(tmp: Path, client: SlurmClient, notice_s: float) -> tuple[Platform, SlurmBackend]:
    b = SlurmBackend(client, tmp / "slurm", tag_prefix=f"bench{time.time_ns()}", notice_s=int(notice_s))
    return make_platform(tmp / "data", {"slurm": b}, b.discover_inventory(), notice_s=notice_s), b


def submit_to_running(client: SlurmClient, tmp: Path, rounds: int) -> dict:
    p, _ = slurm_platform(tmp / "lat", client, 300)
    node = next(n.name for n in client.nodes() if "a100" in n.gpus())
    p.only_nodes({node})
    plain, suanli = [], []
    try:
        for i in range(rounds):
            mark = tmp / f"plain-{i}"
            t0 = time.time()
            jid = client.submit(
                SbatchSpec(
                    name=f"plain{i}",
                    node=node,
                    gpu_type="a100",
                    gpu_count=1,
                    command=f"date +%s.%N > {mark}; sleep 1",
                    output="/dev/null",
                )
            )
            plain.append(float(wait(lambda mark=mark: mark.exists() and mark.read_text().strip(), 30, "plain job")) - t0)
            wait(lambda jid=jid: client.job(jid) is None or not client.job(jid).is_active, 30, "plain job end")
            t0 = time.time()
            job = p.submit(
                name=f"s{i}",
                resources={"accelerators": "A100:1"},
                checkpoint_dir="ckpt",
                run='echo "start at=$(date +%s.%N)" >> "$SUANLI_CHECKPOINT_DIR/log"; sleep 1',
            )
            suanli.append(wait(lambda job=job: lines(p, job, "start"), 30, "suanli job", p.tick)[0] - t0)
            wait(lambda job=job: p.state(job, "succeeded", "failed"), 30, "suanli job end", p.tick)
    finally:
        p.close()
    return {"plain_sbatch_s": plain, "suanli_s": suanli, "ratio_median": statistics.median(suanli) / statistics.median(plain)}


def failover(p: Platform, down, up, candidates: list[str], rounds: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for i in range(rounds):
        job = p.submit(name=f"fo{i}", resources={"accelerators": f"{p.gpu_model}:1"}, run=WORKLOAD, checkpoint_dir="ckpt")
        wait(lambda job=job: lines(p, job, "start"), 30, "job running", p.tick)
        node = p.node_name(p.allocations(job)[0].node_id)
        time.sleep(0.6)  # some checkpoints
        t0 = time.time()
        down(node)
        try:
            restart = wait(lambda job=job: lines(p, job, "start")[1:], 30, "job resumed elsewhere", p.tick)[0]
            assert p.node_name(p.allocations(job)[0].node_id) != node
            out.append(restart - t0)
        finally:
            up(node)
        from suanli.control import jobs as jobs_service

        jobs_service.cancel(p.db, ADMIN, job)
        wait(lambda job=job: p.state(job, "cancelled"), 30, "job cancelled", p.tick)
        wait(
            lambda: all(n.state == "ready" for n, _ in nodes.list_nodes(p.db) if n.name in candidates), 30, "nodes ready", p.tick
        )
    return out


def reclaim(p: Platform, model: str, count: int, rounds: int) -> list[float]:
    leads = []
    for i in range(rounds):
        spot = p.submit(
            name=f"spot{i}",
            resources={"accelerators": f"{model}:{count}", "priority": "spot"},
            run=WORKLOAD,
            checkpoint_dir="ckpt",
        )
        wait(lambda spot=spot: lines(p, spot, "start"), 30, "spot running", p.tick)
        urgent = p.submit(name=f"od{i}", resources={"accelerators": f"{model}:{count}"}, run="sleep 0.5")
        term = wait(lambda spot=spot: lines(p, spot, "TERM"), 60, "spot reclaimed", p.tick)[0]
        usr1 = lines(p, spot, "USR1")
        leads.append(term - usr1[0] if usr1 and usr1[0] <= term else -1.0)  # -1: killed without notice
        wait(lambda urgent=urgent: p.state(urgent, "succeeded"), 60, "on-demand done", p.tick)
        wait(lambda spot=spot: len(lines(p, spot, "start")) == 2, 60, "spot resumed", p.tick)
        from suanli.control import jobs as jobs_service

        jobs_service.cancel(p.db, ADMIN, spot)
        wait(lambda spot=spot: p.state(spot, "cancelled"), 30, "spot cancelled", p.tick)
    return leads


class Heartbeats:
    """Every node's agent, in a thread: beats every ``every_s`` except for silenced nodes."""

    def __init__(self, p: Platform, names: list[str], every_s: float = 0.3) -> None:
        import threading

        from suanli.control import heartbeat

        self.silent: set[str] = set()
        self._halt = threading.Event()

        def run() -> None:
            while not self._halt.wait(every_s):
                for n in names:
                    if n not in self.silent:
                        heartbeat.beat(p.db, ADMIN, n)

        for n in names:
            heartbeat.beat(p.db, ADMIN, n)
        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._halt.set()
        self._thread.join()


def local_platform(tmp: Path, notice_s: float) -> Platform:
    inv = Inventory(
        nodes=[NodeDecl(name=f"local{i}", gpu_model="H100", gpu_count=4, cpu_cores=16, memory_gib=64) for i in (1, 2)]
    )
    p = make_platform(tmp / "data", {}, inv, notice_s=notice_s)
    assert isinstance(p.loop.backends["local"], LocalBackend)  # the embedded default
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--notice", type=float, default=2.0, help="reclaim notice in seconds (platform default: 300)")
    ap.add_argument(
        "--heartbeat-timeout", type=float, default=2.0, help="local heartbeat timeout in seconds (server default: 15)"
    )
    ap.add_argument("--json", type=Path, help="append the result as one JSON line")
    args = ap.parse_args()
    if not os.environ.get("SLURM_CONF"):
        sys.exit('SLURM_CONF is not set: sudo scripts/slurm-cluster start && eval "$(scripts/slurm-cluster env)"')
    client = SlurmClient.from_env()
    result: dict = {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rounds": args.rounds,
        "notice_s": args.notice,
        "load_avg": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="suanli-bench-") as d:
        tmp = Path(d)
        tmp.chmod(0o777)
        result["submit_to_running"] = submit_to_running(client, tmp, args.rounds)

        p, _ = slurm_platform(tmp / "fo", client, args.notice)
        a100 = sorted(n.name for n in client.nodes() if "a100" in n.gpus())[:2]
        p.only_nodes(set(a100))
        p.gpu_model = "A100"  # type: ignore[attr-defined]
        try:
            result["failover_slurm_s"] = failover(
                p,
                lambda n: client.set_node_state(n, "down", reason="bench"),
                lambda n: client.set_node_state(n, "resume"),
                a100,
                args.rounds,
            )
        finally:
            p.close()

        p = local_platform(tmp / "lfo", args.notice)
        p.gpu_model = "H100"  # type: ignore[attr-defined]
        try:
            result["failover_local_s"] = failover(
                p,
                lambda n: nodes.set_state(p.db, ADMIN, n, "down"),
                lambda n: nodes.set_state(p.db, ADMIN, n, "ready"),
                ["local1", "local2"],
                args.rounds,
            )
        finally:
            p.close()

        p = local_platform(tmp / "lhb", args.notice)
        p.gpu_model = "H100"  # type: ignore[attr-defined]
        p.loop.heartbeat_timeout_s = args.heartbeat_timeout
        beats = Heartbeats(p, ["local1", "local2"])
        try:
            result["heartbeat_timeout_s"] = args.heartbeat_timeout
            result["failover_heartbeat_s"] = failover(
                p, beats.silent.add, beats.silent.discard, ["local1", "local2"], args.rounds
            )
        finally:
            beats.stop()
            p.close()

        p, _ = slurm_platform(tmp / "rc", client, args.notice)
        p.only_nodes({sorted(n.name for n in client.nodes() if "h100" in n.gpus())[0]})
        try:
            result["reclaim_lead_slurm_s"] = reclaim(p, "H100", 4, args.rounds)
        finally:
            p.close()

        p = local_platform(tmp / "lrc", args.notice)
        p.only_nodes({"local1"})
        try:
            result["reclaim_lead_local_s"] = reclaim(p, "H100", 4, args.rounds)
        except (TimeoutError, AssertionError) as exc:
            result["reclaim_local_error"] = str(exc)
        finally:
            p.close()
    for key in ("failover_slurm_s", "failover_local_s", "failover_heartbeat_s", "reclaim_lead_slurm_s", "reclaim_lead_local_s"):
        xs = result.get(key) or []
        if xs:
            print(f"{key:24s} median {statistics.median(xs):6.2f}  max {max(xs):6.2f}  min {min(xs):6.2f}  n={len(xs)}")
    s = result["submit_to_running"]
    print(
        f"submit->running          plain sbatch median {statistics.median(s['plain_sbatch_s']):.3f}s  "
        f"through Suanli median {statistics.median(s['suanli_s']):.3f}s  ratio {s['ratio_median']:.2f}"
    )
    for backend in ("slurm", "local"):
        xs = result.get(f"reclaim_lead_{backend}_s") or []
        result[f"notice_before_kill_{backend}_pct"] = 100.0 * sum(x >= 0 for x in xs) / len(xs) if xs else None
    print(json.dumps(result))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        with open(args.json, "a") as f:
            f.write(json.dumps(result) + "\n")


if __name__ == "__main__":
    main()

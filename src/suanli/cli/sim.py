"""``suanli sim``: replay real cluster traces through the scheduler."""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from suanli.scheduler import POLICIES
from suanli.scheduler.preemption import STRATEGIES
from suanli.sim.fill import run_fill
from suanli.sim.metrics import summary
from suanli.sim.traces import TraceError, load_nodes, load_pods

app = typer.Typer(no_args_is_help=True, help="Simulate scheduling policies on real cluster traces.")
err = Console(stderr=True, soft_wrap=True)

NODES = typer.Option(..., "--nodes", help="node list CSV (openb_node_list_*.csv)")
PODS = typer.Option(..., "--pods", help="pod list CSV (openb_pod_list_*.csv)")
TUNE = typer.Option(1.3, "--tune", help="inflate the workload to this multiple of GPU capacity")


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


def _load(nodes: Path, pods: Path, requests_only: bool = True):
    try:
        pod_rows = load_pods(pods)
        return load_nodes(nodes), [p.request for p in pod_rows] if requests_only else pod_rows
    except TraceError as exc:
        raise _fail(str(exc)) from None


UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text: str, option: str) -> float:
    """'300', '300s', '15m', '2h', '30d' -> seconds; '0' or 'none' -> 0."""
    raw = text.strip().lower()
    if raw in ("", "0", "none", "off"):
        return 0.0
    unit = UNITS.get(raw[-1])
    try:
        value = float(raw[:-1]) * unit if unit else float(raw)
    except ValueError:
        value = -1.0
    if value < 0:
        raise _fail(f"{option} must be a duration like 300, 15m, 2h or 30d; got {text!r}")
    return value


def _check_policy(name: str) -> None:
    if name not in POLICIES:
        raise _fail(f"unknown policy {name!r}; choose one of {', '.join(POLICIES)}")


def _seeds(spec: str) -> list[int]:
    """'42-51' or '42,43,50' -> list of ints."""
    try:
        if "-" in spec:
            lo, hi = (int(x) for x in spec.split("-", 1))
            if hi < lo:
                raise ValueError
            return list(range(lo, hi + 1))
        return [int(x) for x in spec.split(",") if x.strip()]
    except ValueError:
        raise _fail(f"--seeds must look like 42-51 or 42,43; got {spec!r}") from None


def _progress() -> Progress:
    """A bar redrawn by its updates, without Rich's refresh thread: a fill forks its
    rehearsals only from a process of one thread (``scheduler/policies/rehearsal.py``)."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=True,
        auto_refresh=False,
    )


@app.command()
def fill(
    nodes: Path = NODES,
    pods: Path = PODS,
    policy: str = typer.Option("suanli", "--policy", help=f"one of: {', '.join(POLICIES)}"),
    seed: int = typer.Option(42, "--seed"),
    tune: float = TUNE,
    defrag_moves: int = typer.Option(0, "--defrag-moves", help="migrate up to N shared pods to place a whole-GPU pod"),
    planner: str = typer.Option(
        "direct", "--planner", help="migration planner: direct (single moves) or repack (CP-SAT, chains)"
    ),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    plot: Path | None = typer.Option(None, "--plot", help="write allocation vs arrived demand to this PNG"),
) -> None:
    """The FGD paper's fill experiment: place pods one by one until tune x capacity arrived."""
    _check_policy(policy)
    if tune <= 0:
        raise _fail("--tune must be > 0")
    if defrag_moves < 0:
        raise _fail("--defrag-moves must be >= 0")
    if planner not in ("direct", "repack"):
        raise _fail(f"--planner must be direct or repack; got {planner!r}")
    node_list, requests = _load(nodes, pods)
    with _progress() as progress:
        task = progress.add_task(f"{policy} seed {seed}", total=None)
        run = run_fill(
            node_list,
            requests,
            policy,
            seed,
            tune,
            lambda d, t: progress.update(task, completed=d, total=t, refresh=True),
            defrag_max_moves=defrag_moves,
            planner=planner,
        )
    result = summary(run)
    if plot:
        from suanli.sim.plot import plot_alloc  # matplotlib only when a plot is asked for

        plot_alloc({policy: [result["alloc_ratio"]]}, plot, f"{pods.name}: {policy}, seed {seed}")
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"fill {pods.name} with {policy} (seed {seed}, tune {tune})")
    for col in ("arrived %", "allocated %", "fragmented %"):
        table.add_column(col, justify="right")
    for c in ("50", "80", "90", "100", "110", "120", "130"):
        if c in result["alloc_ratio"]:
            table.add_row(c, f"{result['alloc_ratio'][c]:.2f}", f"{result['frag_amount'].get(c, 0):.2f}")
    Console().print(table)
    Console().print(
        f"pods {result['pods']}, failed {result['failed_pods']} {result['failed_by_reason']}, "
        f"migrations {result['migrations']}, "
        f"{result['wall_seconds']:.2f} s"
    )


@app.command()
def compare(
    nodes: Path = NODES,
    pods: Path = PODS,
    policies: str = typer.Option("fgd,suanli", "--policies", help="comma-separated policy names"),
    seeds: str = typer.Option("42-51", "--seeds", help="a range 42-51 or a list 42,43"),
    tune: float = TUNE,
    plot: Path = typer.Option(Path("compare.png"), "--plot", help="PNG to write"),
    as_json: bool = typer.Option(False, "--json", help="print per-policy results as JSON"),
) -> None:
    """Run several policies over several seeds; print mean and spread, write a plot."""
    names = [p.strip() for p in policies.split(",") if p.strip()]
    for name in names:
        _check_policy(name)
    seed_list = _seeds(seeds)
    node_list, requests = _load(nodes, pods)
    results: dict[str, list[dict]] = {name: [] for name in names}
    with _progress() as progress:
        task = progress.add_task("fill experiments", total=len(names) * len(seed_list))
        for name in names:
            for seed in seed_list:
                progress.update(task, description=f"{name} seed {seed}", refresh=True)
                results[name].append(summary(run_fill(node_list, requests, name, seed, tune)))
                progress.advance(task)
    from suanli.sim.plot import plot_alloc

    plot_alloc({n: [r["alloc_ratio"] for r in rs] for n, rs in results.items()}, plot, pods.name)
    rows: dict[str, dict[str, Any]] = {}
    for name, runs in results.items():
        row: dict[str, Any] = {}  # per arrival column: mean, stdev, min, max; then the run-wide means
        for col in ("100", "130"):
            vals = [r["alloc_ratio"][col] for r in runs if col in r["alloc_ratio"]]
            row[col] = {
                "mean": round(statistics.fmean(vals), 2) if vals else None,
                "stdev": round(statistics.stdev(vals), 2) if len(vals) > 1 else 0.0,
                "min": min(vals, default=None),
                "max": max(vals, default=None),
            }
        row["failed_pods_mean"] = statistics.fmean(r["failed_pods"] for r in runs)
        row["wall_seconds_mean"] = round(statistics.fmean(r["wall_seconds"] for r in runs), 3)
        rows[name] = row
    if as_json:
        print(json.dumps({"pods": pods.name, "seeds": seed_list, "tune": tune, "policies": rows, "plot": str(plot)}))
        return
    table = Table(title=f"{pods.name}: allocation % at 100 % and 130 % arrived, seeds {seeds}")
    for col in ("policy", "@100 mean ± sd", "@100 min..max", "@130 mean ± sd", "failed pods", "s / run"):
        table.add_column(col, justify="right")
    for name, row in rows.items():
        a, b = row["100"], row["130"]
        table.add_row(
            name,
            f"{a['mean']:.2f} ± {a['stdev']:.2f}",
            f"{a['min']:.2f}..{a['max']:.2f}",
            f"{b['mean']:.2f} ± {b['stdev']:.2f}",
            f"{row['failed_pods_mean']:.0f}",
            f"{row['wall_seconds_mean']:.2f}",
        )
    Console().print(table)
    Console().print(f"plot: {plot}")


@app.command()
def replay(
    nodes: Path = NODES,
    pods: Path = PODS,
    policy: str = typer.Option("suanli", "--policy", help=f"one of: {', '.join(POLICIES)}"),
    load: float | None = typer.Option(None, "--load", help="rescale arrivals to this offered load (see docs/simulator.md)"),
    spot_qos: str = typer.Option("BE", "--spot-qos", help="trace QoS class replayed as spot work"),
    checkpoint_interval: str = typer.Option("0", "--checkpoint-interval", help="e.g. 15m; 0: no checkpoints"),
    node_mtbf: str = typer.Option("0", "--node-mtbf", help="mean time between failures per node, e.g. 30d; 0: none"),
    node_mttr: str = typer.Option("30m", "--node-mttr", help="how long a failed node stays down"),
    notice: str = typer.Option("300", "--notice", help="spot reclaim notice"),
    preemption: str = typer.Option("least_lost_work", "--preemption", help=f"{', '.join(STRATEGIES)} or none"),
    queue: str = typer.Option("priority", "--queue", help="priority (with backfill) or fifo (strict)"),
    seed: int = typer.Option(42, "--seed"),
    migration_moves: int = typer.Option(0, "--migration-moves", help="migrate up to N running shares to start a whole-GPU job"),
    migration_planner: str = typer.Option("direct", "--migration-planner", help="direct or repack (CP-SAT, chains)"),
    migration_downtime: str = typer.Option("60", "--migration-downtime", help="a moved share's stop time"),
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    plot: Path | None = typer.Option(None, "--plot", help="write GPU allocation over time to this PNG"),
) -> None:
    """Replay a trace in time: queueing, spot preemption with notice, node faults."""
    # the event-driven replay (queues, gangs, reclaims) only for this command: ``sim fill``
    # is timed end to end against its core (bench/sim_cli.py) and starts without it
    from suanli.sim.replay import Replay, ReplayConfig
    from suanli.sim.replay import summary as replay_summary

    _check_policy(policy)
    if preemption not in (*STRATEGIES, "none"):
        raise _fail(f"--preemption must be one of {', '.join(STRATEGIES)}, none; got {preemption!r}")
    if queue not in ("priority", "fifo"):
        raise _fail(f"--queue must be priority or fifo; got {queue!r}")
    if load is not None and load <= 0:
        raise _fail("--load must be > 0")
    config = ReplayConfig(
        policy=policy,
        load=load,
        spot_qos=spot_qos,
        checkpoint_interval=parse_duration(checkpoint_interval, "--checkpoint-interval"),
        node_mtbf=parse_duration(node_mtbf, "--node-mtbf"),
        node_mttr=parse_duration(node_mttr, "--node-mttr"),
        notice=parse_duration(notice, "--notice"),
        preemption=preemption,
        queue=queue,
        seed=seed,
        migration_planner=migration_planner,
        migration_moves=migration_moves,
        migration_downtime=parse_duration(migration_downtime, "--migration-downtime"),
    )
    node_list, pod_rows = _load(nodes, pods, requests_only=False)
    try:
        sim = Replay(node_list, pod_rows, config)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    with _progress() as progress:
        task = progress.add_task(f"replay {policy}", total=len(pod_rows))
        result = replay_summary(sim.run(lambda d, t: progress.update(task, completed=d, total=t, refresh=True)))
    if plot:
        from suanli.sim.plot import plot_replay

        plot_replay({policy: result["gpu_allocation_over_time"]}, plot, f"{pods.name}: {policy}, load {load}")
    if as_json:
        print(json.dumps(result))
        return
    table = Table(title=f"replay {pods.name} with {policy} (load {load}, seed {seed})")
    for col in ("class", "jobs", "mean delay s", "p50 s", "p99 s"):
        table.add_column(col, justify="right")
    for cls, d in result["queue_delay_seconds"].items():
        table.add_row(cls, str(d["jobs"]), f"{d['mean']:.1f}", f"{d['p50']:.1f}", f"{d['p99']:.1f}")
    Console().print(table)
    lost = result["lost_gpu_hours"]
    Console().print(
        f"avg GPU allocation {result['avg_gpu_allocation']:.2f} %, preemptions {result['preemptions']}, "
        f"lost GPU-h {lost['preemption']:.2f} (preemption) {lost['faults']:.2f} (faults), node failures "
        f"{result['node_failures']}, recovered {result['jobs_recovered']}, failed {result['jobs_failed']}, "
        f"{result['wall_seconds']:.1f} s"
    )

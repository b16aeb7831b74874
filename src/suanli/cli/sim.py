"""``suanli sim``: replay real cluster traces through the scheduler."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from suanli.scheduler import POLICIES
from suanli.sim.fill import run_fill
from suanli.sim.metrics import summary
from suanli.sim.plot import plot_alloc
from suanli.sim.traces import TraceError, load_nodes, load_pods

app = typer.Typer(no_args_is_help=True, help="Simulate scheduling policies on real cluster traces.")
err = Console(stderr=True, soft_wrap=True)

NODES = typer.Option(..., "--nodes", help="node list CSV (openb_node_list_*.csv)")
PODS = typer.Option(..., "--pods", help="pod list CSV (openb_pod_list_*.csv)")
TUNE = typer.Option(1.3, "--tune", help="inflate the workload to this multiple of GPU capacity")


def _fail(message: str) -> typer.Exit:
    err.print(f"[red]error:[/red] {message}")
    return typer.Exit(2)


def _load(nodes: Path, pods: Path):
    try:
        return load_nodes(nodes), [p.request for p in load_pods(pods)]
    except TraceError as exc:
        raise _fail(str(exc)) from None


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
    return Progress(
        TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=err, transient=True,
    )


@app.command()
def fill(
    nodes: Path = NODES,
    pods: Path = PODS,
    policy: str = typer.Option("suanli", "--policy", help=f"one of: {', '.join(POLICIES)}"),
    seed: int = typer.Option(42, "--seed"),
    tune: float = TUNE,
    as_json: bool = typer.Option(False, "--json", help="print one JSON object"),
    plot: Path | None = typer.Option(None, "--plot", help="write allocation vs arrived demand to this PNG"),
) -> None:
    """The FGD paper's fill experiment: place pods one by one until tune x capacity arrived."""
    _check_policy(policy)
    if tune <= 0:
        raise _fail("--tune must be > 0")
    node_list, requests = _load(nodes, pods)
    with _progress() as progress:
        task = progress.add_task(f"{policy} seed {seed}", total=None)
        run = run_fill(node_list, requests, policy, seed, tune, lambda d, t: progress.update(task, completed=d, total=t))
    result = summary(run)
    if plot:
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
                progress.update(task, description=f"{name} seed {seed}")
                results[name].append(summary(run_fill(node_list, requests, name, seed, tune)))
                progress.advance(task)
    plot_alloc({n: [r["alloc_ratio"] for r in rs] for n, rs in results.items()}, plot, pods.name)
    rows = {}
    for name, runs in results.items():
        row = {}
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
            name, f"{a['mean']:.2f} ± {a['stdev']:.2f}", f"{a['min']:.2f}..{a['max']:.2f}",
            f"{b['mean']:.2f} ± {b['stdev']:.2f}", f"{row['failed_pods_mean']:.0f}", f"{row['wall_seconds_mean']:.2f}",
        )
    Console().print(table)
    Console().print(f"plot: {plot}")

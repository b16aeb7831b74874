"""``suanli verify``: check this machine's GPUs against the catalog (no server needed)."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

err_console = Console(stderr=True)


def verify(
    as_json: bool = typer.Option(False, "--json", help="Print the report as JSON (the contract in docs/verify.md)."),
    quick: bool = typer.Option(False, "--quick", help="Small sizes and few repeats: seconds, for tests and smoke checks."),
    expect: str = typer.Option(None, "--expect", help="The catalog model this node is sold as [default: what NVML says]."),
    min_memory: float = typer.Option(0.90, "--min-memory-ratio", help="Fail below this fraction of the datasheet memory."),
    min_tflops: float = typer.Option(0.50, "--min-tflops-ratio", help="Fail below this fraction of the dense 16-bit peak."),
    allow_vgpu: bool = typer.Option(False, "--allow-vgpu", help="Do not fail a vGPU (virtualization mode vGPU)."),
    cpu: bool = typer.Option(False, "--cpu", help="Measure the CPU path even where there are GPUs."),
    no_allreduce: bool = typer.Option(False, "--no-allreduce", help="Skip the all-reduce (it starts one process per GPU)."),
    record_nvml: Path = typer.Option(
        None, "--record-nvml", dir_okay=False, help="Only write this GPU's NVML answers as a recording."
    ),
) -> None:
    """Check this machine's GPUs against the catalog: NVML identity, memory, TFLOPS, bandwidth."""
    from suanli.verify.judge import ThresholdError, Thresholds

    if record_nvml is not None:
        return _record(record_nvml)
    try:
        limits = Thresholds(min_memory, min_tflops, allow_vgpu)
    except ThresholdError as exc:
        raise typer.BadParameter(str(exc)) from None
    if expect is not None:
        from suanli import gpu_names

        try:
            expect = gpu_names.canonical(expect)
        except gpu_names.UnknownGpu as exc:
            raise typer.BadParameter(str(exc), param_hint="--expect") from None
    from suanli.verify.run import Options, TorchMissing
    from suanli.verify.run import verify as run_verify

    opts = Options(quick=quick, expect=expect, thresholds=limits, force_cpu=cpu, allreduce=not no_allreduce)
    try:
        if as_json:
            report = run_verify(opts)
        else:
            with err_console.status("verifying") as status:
                report = run_verify(opts, progress=lambda s: status.update(s))
    except TorchMissing as exc:
        err_console.print(f"[red]error[/red]: {exc}")
        raise typer.Exit(2) from None
    if as_json:
        typer.echo(json.dumps(report, indent=2))
    else:
        show(report)
    raise typer.Exit(0 if report["ok"] else 1)


def _record(path: Path) -> None:
    from suanli.verify.identity import record

    try:
        import pynvml

        doc = record(pynvml, label=f"recording: NVML answers of {path.stem}")
    except Exception as exc:
        err_console.print(f"[red]error[/red]: no NVML here to record ({type(exc).__name__}: {exc})")
        raise typer.Exit(1) from None
    path.write_text(json.dumps(doc, indent=2) + "\n", "utf-8")
    typer.echo(f"wrote {len(doc['devices'])} GPUs' NVML answers to {path}")


def _num(value: object, fmt: str = "{:,.1f}") -> str:
    return "" if value is None else fmt.format(value)


def show(report: dict) -> None:
    console = Console() if Console().is_terminal else Console(width=200)
    if report.get("message"):
        console.print(f"[yellow]{report['message']}[/yellow]")
    if report["device"] == "cpu":
        c = report["cpu"]
        t = Table(title=f"CPU path: {c['name']} ({c['threads']} threads)")
        for col in (
            "MEMORY TEST",
            "MATMUL n",
            *(f"{d.upper()} TFLOPS" for d in c["tflops"]),
            "COPY GB/s",
            "ALL-REDUCE busbw GB/s",
        ):
            t.add_column(col)
        mt = c["memory_test"]
        ar = c.get("allreduce") or {}
        t.add_row(
            f"{'ok' if c['memory_test_ok'] else 'FAILED'} ({mt['verified_bytes'] / 2**20:,.0f} MiB)",
            str(c["matmul_n"]),
            *(f"{v:.4f}" for v in c["tflops"].values()),
            _num(c["bandwidth_gbs"]),
            _num(ar.get("busbw_gbs"), "{:,.2f}"),
        )
        console.print(t)
        for k, v in c["errors"].items():
            console.print(f"[red]{k}[/red]: {v}")
        return
    t = Table(title="GPUs against the catalog")
    for col in (
        "GPU",
        "NAME",
        "CATALOG",
        "VIRT",
        "MIG",
        "PCIe",
        "NVLINK",
        "MEMORY",
        "TFLOPS (ratio)",
        "COPY GB/s (ratio)",
        "H2D/D2H GB/s",
        "VERDICT",
    ):
        t.add_column(col)
    for g in report["gpus"]:
        tf = ", ".join(f"{d} {v:,.0f}" for d, v in g["tflops"].items())
        t.add_row(
            str(g["index"]),
            g["name"],
            (g["catalog"] or {}).get("model", "not in catalog"),
            g["virtualization"],
            g["mig_mode"] or "",
            f"gen{g['pcie_gen']} x{g['pcie_width']}" if g["pcie_gen"] else "",
            _num(g["nvlink_links"], "{}"),
            f"{g['memory_total_mib']:,.0f} MiB {'ok' if g['memory_test_ok'] else 'FAILED'}",
            f"{tf} ({_num(g['tflops_ratio'], '{:.0%}')})",
            f"{_num(g['bandwidth_gbs'], '{:,.0f}')} ({_num(g['bandwidth_ratio'], '{:.0%}')})",
            f"{_num(g['host_to_device_gbs'])}/{_num(g['device_to_host_gbs'])}",
            "[green]ok[/green]" if g["ok"] else "[red]FAILED[/red]",
        )
    console.print(t)
    for g in report["gpus"]:
        for r in g["reasons"]:
            console.print(f"GPU {g['index']} [red]fails[/red]: {r}")
        for n in g["notes"]:
            console.print(f"GPU {g['index']} note: {n}")
    ar = report.get("allreduce")
    if ar:
        console.print(
            f"all-reduce ({ar['backend']}, {ar['ranks']} GPUs, {ar['size_mib']} MiB): bus bandwidth {ar['busbw_gbs']:,.1f} GB/s"
        )

"""Plots of fill experiments: GPU allocation against arrived demand."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def plot_alloc(curves: Mapping[str, Sequence[Mapping[str, float]]], path: Path, title: str = "") -> None:
    """``curves``: policy -> per-seed ``alloc_ratio`` dicts; draws the mean and the
    min-max band over seeds."""
    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    for policy, runs in curves.items():
        cols = sorted({int(c) for run in runs for c in run}, key=int)
        xs = [c for c in cols if all(str(c) in run for run in runs)]
        values = [[run[str(c)] for run in runs] for c in xs]
        mean = [sum(v) / len(v) for v in values]
        ax.plot(xs, mean, label=policy, linewidth=1.4)
        ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values], alpha=0.2)
    ax.plot([0, 130], [0, 130], color="grey", linewidth=0.6, linestyle=":")
    ax.set_xlim(0, 130)
    ax.set_ylim(0, 100)
    ax.set_xlabel("arrived GPU demand (% of capacity)")
    ax.set_ylabel("GPU allocation ratio (%)")
    ax.set_title(title or "Fill experiment")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", fontsize=8)
    inset = ax.inset_axes((0.55, 0.1, 0.4, 0.4))  # below the curve, which runs along the diagonal
    for runs in curves.values():
        xs = [c for c in range(90, 131) if all(str(c) in run for run in runs)]
        inset.plot(xs, [sum(run[str(c)] for run in runs) / len(runs) for c in xs], linewidth=1.0)
    inset.set_title("90-130 %", fontsize=7)
    inset.tick_params(labelsize=6)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def plot_replay(series: Mapping[str, Sequence[Sequence[float]]], path: Path, title: str = "") -> None:
    """``series``: label -> [(seconds, allocated %)]; time shown in hours from the start."""
    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    for label, points in series.items():
        if not points:
            continue
        t0 = points[0][0]
        ax.step([(t - t0) / 3600 for t, _ in points], [a for _, a in points], where="post", label=label, linewidth=1.1)
    ax.set_xlabel("hours since the first arrival")
    ax.set_ylabel("GPU allocation (% of capacity)")
    ax.set_ylim(0, 100)
    ax.set_title(title or "Replay")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

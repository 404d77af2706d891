"""PNG line plots for the crawl benchmark (matplotlib, no display): throughput and queue depth over time."""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only: the benchmark runs headless, inside a network namespace

import matplotlib.pyplot as plt  # noqa: E402 (the backend must be chosen first)

Series = Sequence[tuple[float, float]]


def plot_lines(path: Path, title: str, ylabel: str, series: Mapping[str, Series],
               marks: Sequence[tuple[float, str]] = ()) -> Path:
    """One line per named series of (seconds, value) points, dashed vertical `marks` (e.g. warm-up end).

    Series without points are left out of the legend rather than drawn empty. Returns `path`.
    """
    fig, ax = plt.subplots(figsize=(8, 4), dpi=100)
    try:
        for name, points in series.items():
            if points:
                xs, ys = zip(*points)
                ax.plot(xs, ys, label=name, linewidth=1.5)
        for x, label in marks:
            ax.axvline(x, linestyle="--", color="grey", linewidth=1)
            ax.annotate(label, (x, 1.0), xycoords=("data", "axes fraction"), xytext=(3, -12),
                        textcoords="offset points", fontsize=8, color="grey")
        ax.set_title(title)
        ax.set_xlabel("seconds since the crawler's first request")
        ax.set_ylabel(ylabel)
        ax.grid(True, alpha=0.3)
        if any(series.values()):
            ax.legend()
        fig.tight_layout()
        path.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(path)
    finally:
        plt.close(fig)
    return path

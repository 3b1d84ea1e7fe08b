"""``--plot FILE.png``: speedup and % of roofline per shape (matplotlib, optional).

One row of two panels per (op, dtype): left, the speedup of each exactfuse
provider over each baseline per shape (log scale, 1x marked); right, the %
of roofline of every timed provider per shape.
"""

from __future__ import annotations

import os
from pathlib import Path

from exactfuse.bench.results import Row


class PlotUnavailableError(RuntimeError):
    """matplotlib is not installed (``pip install exactfuse[bench]``)."""


def _groups(rows: list[Row]) -> dict[tuple[str, str], list[Row]]:
    groups: dict[tuple[str, str], list[Row]] = {}
    for row in rows:
        groups.setdefault((row.op, row.dtype), []).append(row)
    return groups


def plot(rows: list[Row], path: str | os.PathLike, title: str = "") -> Path:
    """Draw ``rows`` to ``path`` (PNG); raises :class:`PlotUnavailableError` without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        from matplotlib.ticker import FuncFormatter
    except ImportError as exc:
        raise PlotUnavailableError("--plot needs matplotlib (pip install matplotlib)") from exc

    groups = _groups([r for r in rows if r.timed])
    if not groups:
        raise ValueError("nothing was timed: no plot to draw")
    fig, axes = plt.subplots(len(groups), 2, figsize=(15, 4.2 * len(groups)), squeeze=False)
    for (left, right), ((op, dtype), group) in zip(axes, groups.items(), strict=True):
        shapes = list(dict.fromkeys(r.shape for r in group))
        table = {(r.provider, r.shape): r for r in group}
        kinds = {r.provider: r.kind for r in group}
        ours = [p for p, k in kinds.items() if k == "exactfuse"]
        baselines = [p for p, k in kinds.items() if k != "exactfuse"]
        x = range(len(shapes))
        for mine in ours:
            for base in baselines:
                ys = [
                    table[(base, s)].time_us / table[(mine, s)].time_us
                    if (base, s) in table and (mine, s) in table
                    else float("nan")
                    for s in shapes
                ]
                left.plot(x, ys, marker="o", label=f"{mine} vs {base}")
        left.axhline(1.0, color="grey", linewidth=0.8)
        left.set_yscale("log")
        speedup_format = FuncFormatter(lambda v, _: f"{v:.3g}x")
        left.yaxis.set_major_formatter(speedup_format)
        left.yaxis.set_minor_formatter(speedup_format)
        left.tick_params(axis="y", which="minor", labelsize=6)
        top = 100.0
        left.set_title(f"{op} {dtype}: speedup (baseline / exactfuse)")
        for provider in kinds:
            ys = [
                table[(provider, s)].pct_roofline
                if (provider, s) in table and table[(provider, s)].pct_roofline is not None
                else float("nan")
                for s in shapes
            ]
            right.plot(x, ys, marker="o", label=provider)
            top = max([top, *(y for y in ys if y == y)])
        right.set_ylim(0, top * 1.05)  # above 100%: the shape was (partly) served from L2
        right.set_title(f"{op} {dtype}: % of roofline")
        for ax in (left, right):
            ax.set_xticks(list(x))
            ax.set_xticklabels(shapes, rotation=60, ha="right", fontsize=7)
            ax.grid(True, alpha=0.3)
            if ax.get_legend_handles_labels()[0]:
                ax.legend(fontsize=7)
    if title:
        fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path

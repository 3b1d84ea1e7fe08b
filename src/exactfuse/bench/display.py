"""Rich output of a bench run: a live table per (op, dtype) with a progress bar, and summaries."""

from __future__ import annotations

import torch
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from exactfuse.bench.results import Row
from exactfuse.bench.runner import DTYPE_NAMES, NATIVE, Reporter
from exactfuse.registry import Case, Op

_STATUS_STYLE = {"failed": "bold red", "error": "red", "skipped": "dim", "inexact": "yellow"}


def _cell(row: Row | None) -> str:
    """``12.3 (1.85x)`` with the status when it was not timed."""
    if row is None:
        return ""
    if not row.timed:
        style = _STATUS_STYLE.get(row.status, "")
        return f"[{style}]{row.status}[/]" if style else row.status
    text = f"{row.time_us:,.1f}"
    if row.provider != NATIVE and row.speedup_vs_native:
        colour = "green" if row.speedup_vs_native >= 1 else "red"
        text += f" [{colour}]({row.speedup_vs_native:.2f}x)[/]"
    if row.status == "inexact":
        text += f" [yellow]err {row.max_abs_err:.2g}[/]"
    return text


def _resources(rows: list[Row]) -> str:
    parts = []
    for row in rows:
        for k in row.kernels:
            parts.append(f"{row.provider}: {k.get('n_regs')}r/{k.get('n_spills')}s/{k.get('shared')}B")
    return "; ".join(parts)


class RichReporter(Reporter):
    """Draws the rows of the current (op, dtype) as they finish, under a progress bar over shapes; where the
    console is not a terminal (a log file), one line a case as it finishes instead."""

    def __init__(self, console: Console):
        self.console = console
        self.live: Live | None = None

    def start(self, op: Op, dtype: torch.dtype, providers: list[str], n_cases: int) -> None:
        self.providers = providers
        self.table = Table(title=f"{op.name} {DTYPE_NAMES.get(dtype, dtype)}  (µs, speedup vs native)")
        self.table.add_column("shape", style="bold")
        for name in providers:
            self.table.add_column(name, justify="right")
        self.table.add_column("% roofline", justify="right")
        self.table.add_column("regs/spills/smem", style="dim")
        self.progress = Progress(
            TextColumn(f"{op.name} {DTYPE_NAMES.get(dtype, dtype)}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.description}"),
            TimeElapsedColumn(),
            console=self.console,
        )
        self.task = self.progress.add_task("", total=n_cases)
        self.n_cases, self.n_done = n_cases, 0
        if self.console.is_terminal:
            self.live = Live(Group(self.table, self.progress), console=self.console, refresh_per_second=4)
            self.live.start()

    def case_done(self, op: Op, dtype: torch.dtype, case: Case, rows: list[Row]) -> None:
        by_provider = {r.provider: r for r in rows}
        roof = ", ".join(
            f"{r.provider} {r.pct_roofline:.0f}%" for r in rows if r.kind == "exactfuse" and r.pct_roofline is not None
        )
        cells = [_cell(by_provider.get(p)) for p in self.providers]
        self.table.add_row(case.id, *cells, roof, _resources(rows))
        self.progress.update(self.task, advance=1, description=case.id)
        self.n_done += 1
        if self.live is None:
            named = "  ".join(f"{p} {c}" for p, c in zip(self.providers, cells, strict=True) if c)
            where = f"{op.name} {DTYPE_NAMES.get(dtype, dtype)} [{self.n_done}/{self.n_cases}] {case.id}"
            self.console.print(f"{where}: {named}  {roof}  [dim]{_resources(rows)}[/]")

    def done(self, op: Op, dtype: torch.dtype, rows: list[Row]) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None
        for row in rows:
            if row.status in ("failed", "error"):
                self.console.print(
                    f"[red]{row.op} {row.dtype} {row.shape} {row.provider}: {row.status}[/] {escape(row.note)}"
                )

    def close(self) -> None:
        if self.live is not None:
            self.live.stop()
            self.live = None


def summary_table(op: str, summary: list[dict]) -> Table:
    """Speedup of each exactfuse provider over each baseline."""
    table = Table(title=f"{op}: speedup of exactfuse providers (baseline time / provider time)")
    for name in ("dtype", "provider", "vs", "shapes", "geomean", "median", "min", "max", "wins", "losses"):
        table.add_column(name, justify="left" if name in ("dtype", "provider", "vs") else "right")
    for s in summary:
        colour = "green" if s["geomean"] >= 1 else "red"
        table.add_row(
            s["dtype"],
            s["provider"],
            s["baseline"] + (" (inexact)" if s["baseline_inexact"] else ""),
            str(s["shapes"]),
            f"[{colour}]{s['geomean']:.2f}x[/]",
            f"{s['median']:.2f}x",
            f"{s['min']:.2f}x",
            f"{s['max']:.2f}x",
            str(s["wins"]),
            str(s["losses"]),
        )
    return table

"""Markdown tables of committed benchmark results, for benchmarks/results/*/README.md.

    python3 scripts/results_table.py benchmarks/results/h200/silu_and_mul.json [--provider triton]

One row per (dtype, shape): the exactfuse provider's µs, every other provider's
µs, the provider's speedup over each of them, and its % of roofline; then the
summary of the JSON (geomean / min / max per baseline) and, when the run was
cut by ``--time-budget``, how many cases it did not run.
"""

from __future__ import annotations

import argparse
import json


def table(path: str, provider: str = "triton") -> str:
    with open(path) as f:
        data = json.load(f)
    rows = data["rows"]
    others = list(dict.fromkeys(r["provider"] for r in rows if r["provider"] != provider))
    by: dict[tuple[str, str], dict[str, dict]] = {}
    for r in rows:
        by.setdefault((r["dtype"], r["shape"]), {})[r["provider"]] = r

    def us(r):
        return r.get("time_us") if r and r.get("status") in ("ok", "inexact", "reference") else None

    head = ["dtype", "shape", f"{provider} µs", *(f"{o} µs" for o in others), *(f"vs {o}" for o in others)]
    lines = ["| " + " | ".join([*head, "% roofline"]) + " |", "|---|---|" + "---:|" * (len(head) - 1)]
    for (dtype, shape), cells in by.items():
        mine = cells.get(provider)
        t = us(mine)
        times = [us(cells.get(o)) for o in others]
        fmt = [f"{x:.2f}" if x else "–" for x in [t, *times]]
        speed = [f"{x / t:.2f}x" if (x and t) else "–" for x in times]
        roof = f"{mine['pct_roofline']:.1f}%" if mine and mine.get("pct_roofline") is not None and t else "–"
        status = "" if t or not mine else f" ({mine.get('status')})"
        lines.append(f"| {dtype} | {shape}{status} | " + " | ".join([*fmt, *speed, roof]) + " |")
    out = "\n".join(lines)
    for s in data.get("summary", []):
        if s["provider"] == provider:
            out += (
                f"\n\n{s['dtype']} vs {s['baseline']}: geomean {s['geomean']:.2f}x, median {s['median']:.2f}x, "
                f"min {s['min']:.2f}x, max {s['max']:.2f}x, {s['wins']} wins / {s['losses']} losses "
                f"over {s['shapes']} shapes"
            )
    missing = data["meta"].get("incomplete", {}).get("cases_not_run")
    if missing:
        out += f"\n\nCut by the time budget: {len(missing)} case(s) not run ({', '.join(missing[:6])}, ...)."
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("json")
    parser.add_argument("--provider", default="triton")
    args = parser.parse_args()
    print(table(args.json, args.provider))


if __name__ == "__main__":
    main()

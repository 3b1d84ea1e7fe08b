"""Join the JSON results of one op's ``exactfuse bench --shard I/N`` runs into one ``<op>.csv/.json``.

python3 scripts/merge_results.py OUT_DIR shard0/moe_silu_and_mul.json shard1/moe_silu_and_mul.json [--plot F.png]
"""

from __future__ import annotations

import argparse

from exactfuse.bench import results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out_dir")
    parser.add_argument("files", nargs="+")
    parser.add_argument("--plot", help="also draw the merged rows (matplotlib)")
    args = parser.parse_args()
    op, rows, meta = results.merge_results(args.files)
    csv_path, json_path = results.write_op_results(args.out_dir, op, rows, meta)
    print(f"{op}: {len(rows)} rows from {len(args.files)} files -> {csv_path}, {json_path}")
    if args.plot:
        from exactfuse.bench.plot import plot

        plot(rows, args.plot, f"{meta.get('gpu')}, git {meta.get('git_rev')}, merged from {len(args.files)} shards")


if __name__ == "__main__":
    main()

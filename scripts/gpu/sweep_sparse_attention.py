"""sparse_paged_attention's (block_n, splits, warps) per bench-grid shape (W = 2048, 32k context of 1024-token
pages; (Hq, Hkv) in {(24, 2), (64, 4)}, D in {128, 256}), each checked against the float64 reference under
the contract's rule first: per shape the best configuration, the rule's, their ratio and the rule's % of the
roofline (sweeps/sparse_attention_config.txt). Variants marked in the labels: ``--fixup`` the merge in the
same launch (``f``), ``--stages 2,3`` pipeline depths (``s3``), ``--kv e4m3`` an fp8 cache with ``--v-bytes``
its V read a byte at a time (``b``), ``--prefetch-slots`` the next tile's slots loaded ahead (``p``)."""

import argparse
import dataclasses
import itertools

import torch
from common import device_line, emit, geomean, ints, time_us

from exactfuse.ops.sparse_paged_attention import _sparse_paged_attention, heuristics, native
from exactfuse.ops.sparse_paged_attention import launch as attention_launch
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.testing.cases import sparse_paged_attention as inputs

PAIRS_RULE = attention_launch._even


def run(args: tuple, config: AttentionConfig, v_bytes: bool = False, timed: bool = False):
    """The launch at ``config`` (``v_bytes``: an fp8 ``V`` read a byte at a time); ``timed``: its median µs."""
    attention_launch._even = (lambda t: False) if v_bytes else PAIRS_RULE
    try:
        call = lambda: attention_launch.launch_sparse_paged_attention(*args, config=config)  # noqa: E731
        return time_us(call, rep_ms=4) if timed else call()
    finally:
        attention_launch._even = PAIRS_RULE


def label(key) -> str:
    c, v_bytes = key
    marks = (", f" if c.fixup else "") + (f", s{c.num_stages}" if c.num_stages != AttentionConfig.num_stages else "")
    marks += (", b" if v_bytes else "") + (", p" if c.prefetch_slots else "")
    return f"({c.block_n}, {c.num_splits}, {c.num_warps}{marks})"


def sweep_shape(args, rows, Hkv, W, sms, lines, opts) -> dict:
    """Every candidate's µs on one case (after its contract check), keyed by (config, V read by bytes)."""
    expected = torch.empty_like(args[0])
    _sparse_paged_attention.native(expected, *args[1:])
    ref = native.reference64(*args)
    scale = float(torch.linalg.vector_norm(ref))
    bound = 2 * float(torch.linalg.vector_norm(expected.double() - ref)) / scale  # the contract's rule
    times, on_off = {}, (False, True)
    candidates = itertools.product((32, 64), (4, 8), (1, 2, 4, 8, 16, 32, 64), on_off if opts.fixup else (False,),
                                   ints(opts.stages), on_off if opts.v_bytes else (False,),
                                   on_off if opts.prefetch_slots else (False,))  # fmt: skip
    for block_n, warps, splits, fixup, stages, v_bytes, prefetch in candidates:
        if splits > -(-W // block_n) or (splits > 1 and rows * Hkv * splits > 16 * 4 * sms) or (fixup and splits == 1):
            continue
        config = AttentionConfig(block_n, splits, warps, stages, fixup, prefetch)
        run(args, config, v_bytes)
        err = float(torch.linalg.vector_norm(args[0].double() - ref)) / scale
        if not err <= bound:
            lines.append(f"  {label((config, v_bytes))}: FAILS, rel err {err:.3g} > {bound:.3g}")
            continue
        times[config, v_bytes] = run(args, config, v_bytes, timed=True)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1,16,64,256,1024,4096")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--kv", choices=["bf16", "e4m3"], default="bf16")
    parser.add_argument("--fixup", action="store_true", help="also the merge in the same launch")
    parser.add_argument("--stages", default="2", help="software-pipeline stages to time (e.g. 2,3)")
    parser.add_argument("--v-bytes", action="store_true", help="fp8: also V read a byte at a time")
    parser.add_argument("--prefetch-slots", action="store_true", help="also the next tile's slots loaded ahead")
    parser.add_argument("--out", default="sparse_attention_config.txt")
    opts = parser.parse_args()
    kv, W = torch.float8_e4m3fn if opts.kv == "e4m3" else torch.bfloat16, opts.width
    line, sms, copy = device_line()
    head = "shape | best (block_n, splits, warps) us | heuristic us | heuristic / best | heuristic % roofline"
    lines = [f"{line}; W = {W}, {opts.kv} cache", head]
    ratios, variant_ratios = [], {}
    shapes = itertools.product(inputs.GRID_HEADS, (128, 256), ints(opts.rows))
    for seed, ((Hq, Hkv), D, rows) in enumerate(shapes):
        case = inputs._grid_case(torch.device("cuda"), torch.bfloat16, seed, rows, Hq, Hkv, D, W, kv)
        times = sweep_shape(case.args, rows, Hkv, W, sms, lines, opts)
        mine = heuristics.attention_config(rows, Hkv, D, W, sms, case.args[2].element_size()), False
        times[mine] = times.get(mine) or run(case.args, mine[0], timed=True)
        best = min(times, key=times.get)
        roof = _sparse_paged_attention.bytes_fn(*case.args) / copy * 1e6
        ratios.append(times[mine] / times[best])
        lines.append(f"{case.id} | {label(best)} {times[best]:.1f} | {label(mine)} {times[mine]:.1f} | "
                     f"{ratios[-1]:.2f} | {100 * roof / times[mine]:.0f}%")  # fmt: skip
        print(lines[-1], flush=True)
        ranked = sorted(times.items(), key=lambda kv: kv[1])[:8]
        lines.append("   " + " ".join(f"{label(c)}:{t:.1f}" for c, t in ranked))
        flipped = dataclasses.replace(mine[0], prefetch_slots=not mine[0].prefetch_slots)
        prefetched = "slots prefetched" if flipped.prefetch_slots else "slots not prefetched"
        variants = ((opts.v_bytes, (mine[0], True), "V by bytes"), (opts.prefetch_slots, (flipped, False), prefetched))
        for on, key, name in variants:
            if on:
                other = times.get(key) or run(case.args, *key, timed=True)
                lines.append(f"   heuristic, rule / {name}: {times[mine]:.1f} / {other:.1f} us")
                variant_ratios.setdefault(name, []).append(times[mine] / other)
        del case
        torch.cuda.empty_cache()
    lines.append(f"heuristic / best: geomean {geomean(ratios):.3f}, max {max(ratios):.2f}")
    for name, r in variant_ratios.items():
        lines.append(f"rule / {name} at the heuristic: geomean {geomean(r):.3f}, min {min(r):.3f}, max {max(r):.3f}")
    emit(opts.out, lines)


if __name__ == "__main__":
    main()

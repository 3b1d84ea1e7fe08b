"""moe_silu_and_mul's launch settings, bf16, M {384, 4096, 49152} x N {768, 1536, 3072} x both layouts x with and
without row weights: outputs a program (1024-4096) x warps (4, 8) and each hint flipped, as shipped time /
alternative's (geomean), after the largest ulp against native per dtype (sweeps/moe_config.*). ``--grid-order``:
only the grid order (``MoeConfig.row_grid``) flipped, outputs checked first (sweeps/moe_grid_order.txt)."""

import argparse
import dataclasses
import itertools

import torch
from common import device_line, emit, geomean, rotated, time_sets

from exactfuse.ops.moe_silu_and_mul import heuristics as mh
from exactfuse.ops.moe_silu_and_mul import launch as moe_launch
from exactfuse.ops.moe_silu_and_mul import native as moe_native
from exactfuse.registry import ulp_distance

SHAPES = list(itertools.product((384, 4096, 49152), (768, 1536, 3072), (False, True), (False, True)))


def shapes():
    """(label, rotated (gateup, weights, interleaved) sets, the shipped config) per sweep shape."""
    for M, N, inter, weights in SHAPES:
        sets = rotated(lambda M=M, N=N, i=inter, w=weights: (
            torch.randn(M, 2 * N, dtype=torch.bfloat16, device="cuda"),
            torch.rand(M, device="cuda") if w else None, i), M * N * 6)  # fmt: skip
        shape = f"M{M}-N{N}-{'inter' if inter else 'split'}-{'w32' if weights else 'none'}"
        yield shape, sets, mh.moe_config(N, 2, inter)


def launch(config=None):
    """The kernel's launch, at ``config`` or (None) the shipped rule's."""
    return lambda x, w, interleaved: moe_launch.launch_moe_silu_and_mul(x, w, interleaved, None, config=config)


def grid_order() -> list[str]:
    lines, ratios = ["shape | shipped µs | grid flipped µs | shipped / flipped"], []
    for shape, sets, config in shapes():
        flipped = launch(dataclasses.replace(config, row_grid=not config.row_grid))
        assert torch.equal(flipped(*sets[0]), launch()(*sets[0])), shape
        mine, theirs = time_sets(launch(), sets), time_sets(flipped, sets)
        ratios.append(mine / theirs)
        lines.append(f"{shape} | {mine:.1f} | {theirs:.1f} | {ratios[-1]:.3f}")
        print(lines[-1], flush=True)
    row_grid = mh.moe_config(1024, 2, False).row_grid
    return [*lines, f"shipped (row_grid={row_grid}) / flipped: geomean {geomean(ratios):.3f}, min {min(ratios):.3f}, "
            f"max {max(ratios):.3f}"]  # fmt: skip


def numerics() -> str:
    """Max ulp of the kernel against native per dtype (0: bitwise), and whether both layouts agree bitwise."""
    worst, equal = {}, True
    dtypes = (torch.bfloat16, torch.float16, torch.float32)
    for (M, N), dtype, weighted in itertools.product(((7, 384), (33, 960), (384, 1024), (4096, 3072)), dtypes, (0, 1)):
        g, u = torch.randn(M, N, dtype=dtype, device="cuda") * 3, torch.randn(M, N, dtype=dtype, device="cuda")
        w = torch.rand(M, device="cuda") if weighted else None
        split, inter = torch.cat([g, u], 1), torch.stack([g, u], 2).reshape(M, 2 * N)
        a, b = launch()(split, w, False), launch()(inter, w, True)
        equal &= torch.equal(a, b)
        ref = moe_native.moe_silu_and_mul(split, w, False)
        key = str(dtype).removeprefix("torch.")
        worst[key] = max(worst.get(key, 0), int(ulp_distance(a, ref).max()), int(ulp_distance(b, ref).max()))
    return f"max ulp vs native: {worst} (0: bitwise; contract Ulp(1)); layouts bitwise equal: {equal}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--grid-order", action="store_true", help="only the grid order, flipped against shipped")
    grid_only = parser.parse_args().grid_order
    header = device_line()[0] + "; bf16, median of CUDA-graph replays"
    if grid_only:
        return emit("moe_grid_order.txt", [header, *grid_order()])
    lines, rows, ratios = [header, numerics()], [], {}
    for shape, sets, config in shapes():
        variants = {f"t{t}-w{w}": dataclasses.replace(config, BM=max(1, t // config.BN), num_warps=w)
                    for t, w in itertools.product((1024, 2048, 4096), (4, 8))}  # fmt: skip
        variants["evict_first flipped"] = dataclasses.replace(config, evict_first=not config.evict_first)
        if sets[0][2]:  # interleaved: the store contiguity hint (8-byte stores) against none
            variants["store hint flipped"] = dataclasses.replace(config, store_run=0 if config.store_run else 4)
        row = {"shape": shape, "shipped": time_sets(launch(), sets)}
        row |= {name: time_sets(launch(c), sets) for name, c in variants.items()}
        rows.append(row)
        for name in variants:
            ratios.setdefault(name, []).append(row["shipped"] / row[name])
        print(shape, " ".join(f"{k}={v:.2f}" for k, v in row.items() if k != "shape"), flush=True)
    shipped = mh.moe_config(1024, 2, False)
    lines.append(f"shipped: {shipped.BM * shipped.BN} outputs a program, {shipped.num_warps} warps, evict_first "
                 f"{shipped.evict_first}; geomean shipped time / alternative's (< 1: shipped faster)")  # fmt: skip
    lines += [f"  {name:>20}: {geomean(r):.3f}" for name, r in ratios.items()]
    emit("moe_config.txt", lines, {"rows": rows})


if __name__ == "__main__":
    main()

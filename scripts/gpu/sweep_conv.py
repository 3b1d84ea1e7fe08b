"""Sweep the conv family's spec/prefill tile on the GPU: rows x channels a program, and warps.

Usage: PYTHONPATH=src python scripts/gpu/sweep_conv.py [--tiles 16x128,32x128u8,...] [--warps 4,8] [--floor]
       PYTHONPATH=src python scripts/gpu/sweep_conv.py --decode|--update [--channels 64,128,...] [--warps 1,2,4,8]
                                                       [--rows 1,2,4] [--paths ,t,f] [--orders p,c]

A tile is ``BTxBC`` (each tap's rows loaded) or ``BTxBCuU`` (runs of ``U`` rows over a register window,
``ConvConfig.unroll``: in the lean kernel, and in the row kernel's tiles where there is none); a suffix ``g``
gives every tile the row kernel's per-row masked tap sum (``ConvConfig.lean`` off: no lean kernel).

On the bench grid's causal_conv1d shapes (B x L in {1 x 8192, 8 x 1024, 64 x 128, 4 x 8192, 16 x 4096},
C = 10240, K = 4, SiLU, slot cache with initial states) it times the row and write-back kernels with
each ``ConvConfig(BT, BC, unroll)`` x warps, after checking the output and the state bit for bit against the
shipped configuration's (which the GPU tests hold bitwise to the spec), and prints µs, % of the copy
roofline (``exactfuse bench``'s cost) and the geomean against the shipped tile. Times: median of
CUDA-graph replays on copies of the case (the op writes its state). Result:
benchmarks/results/h200/sweeps/conv_tiles.txt.

``--floor`` also times, per shape, the shipped tile and fla-core's ``causal_conv1d`` each with the SiLU
and without an activation: what the exact SiLU (``libdevice`` ``expf`` and an IEEE division, as ATen
evaluates it, where FLA takes ``x * sigmoid(x)``) costs a kernel that issues more instructions than the
memory system needs. Result: sweeps/conv_floor.txt.

``--decode`` times short_conv's decode launch instead, on the bench grid's decode shapes (R rows of
C = 10240, K = 4, D = 3, both state layouts) with ``BC`` channels a program (each program also shifts
its request's ``[BW, BC]`` state window) x warps x the window held in registers or loaded twice
(``ConvConfig.window_tile``, labelled ``t``) or, over dense ``[C, W]`` slots, the block's windows moved as one
flat run (``ConvConfig.flat_window``, ``f``) x the grid's order (``--orders``: ``p`` the plain grid, ``c``
``ConvConfig.channels_first``, consecutive programs take one row's channel blocks, labelled ``c``) x rows a
program (``--rows``, ``ConvConfig.BT``, labelled ``rN``), each checked bit for bit (residual and state) against
the shipped rule's first; at R <= 8 also a plain copy of the same bytes (half read, half written), the
issue's small-batch reference. Result: sweeps/conv_decode.txt.

``--update`` does the same for causal_conv1d_update at B = 1-1024: on the grid's slot-cache cases
(``[slots, C, K - 1]`` with state indices, an odd channel stride) and on its ``-lastK`` cases (FLA's decode
state: each request's last ``K`` inputs in row ``r`` of ``[B, C, K]``, ``history_at="end"``), those beside
fla-core's autotuned ``causal_conv1d_update`` timed on the same inputs in the same run (its output and state
within 2e-2 of the shipped rule's, and the configuration its autotuner chose). Result:
sweeps/conv_update_decode.txt.
"""

from __future__ import annotations

import argparse
import itertools
import re

import torch
from sweep_io import emit

from exactfuse.bench.results import geomean
from exactfuse.bench.roofline import measure_copy_bandwidth
from exactfuse.bench.timing import cudagraph_timer
from exactfuse.ops.conv import _causal_conv1d, _causal_conv1d_update, _short_conv, calls, heuristics
from exactfuse.ops.conv.triton import _dense_slots, _dense_windows, _history_head, launch_conv
from exactfuse.testing import clone_args
from exactfuse.testing.cases.conv import _causal_grid, _short_conv_grid, _update_grid

TIMER = cudagraph_timer(rep_ms=10)
DEFAULT_TILES = "16x128,32x128,16x128u4,16x128u8,16x256u8,8x512u8,32x64u8,32x128u8,64x64u8,32x128u16,16x128g"


def parse_tile(text: str) -> tuple[int, int, int, bool]:
    """``BTxBC[uU][g]`` -> (BT, BC, unroll, lean): ``"32x128u8"`` -> (32, 128, 8, True), ``"16x128g"`` ->
    (16, 128, 1, False)."""
    bt, bc, unroll, general = re.fullmatch(r"(\d+)x(\d+)(?:u(\d+))?(g)?", text).groups()
    return int(bt), int(bc), int(unroll or 1), not general


def label(bt: int, bc: int, unroll: int, lean: bool, warps: int) -> str:
    return f"{bt}x{bc}" + (f"u{unroll}" if unroll > 1 else "") + ("" if lean else "g") + f"/{warps}"


def run(case, config):
    """causal_conv1d's launch on a copy of ``case`` with ``config``: (call, output, state)."""
    args, kwargs = clone_args(case.args, case.kwargs)
    bound = _causal_conv1d.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    out = torch.empty_like(a["x"])
    call = calls.causal_conv1d_call(*a.values())
    return (lambda: launch_conv(call, out=out, config=config)), out, a["conv_state"]


def run_decode(case, config):
    """short_conv's launch on a copy of ``case`` with ``config``: (call, residual, state)."""
    args, kwargs = clone_args(case.args, case.kwargs)
    bound = _short_conv.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    a = bound.arguments
    call = calls.short_conv_call(*a.values())
    return (lambda: launch_conv(call, config=config)), a["residual"], a["conv_state"]


def run_update(case, config):
    """causal_conv1d_update's launch on a copy of ``case`` with ``config``: (call, output, state)."""
    args, kwargs = clone_args(case.args, case.kwargs)
    bound = _causal_conv1d_update.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    a = dict(bound.arguments)
    state, history_at = a["conv_state"], a.pop("history_at")
    head = _history_head(state, a["weight"], a["dilation"], history_at)
    call = calls.causal_conv1d_update_call(*a.values())
    out = torch.empty_like(a["x"])
    return (lambda: launch_conv(call, out=out.view(call.x.shape), config=config, head=head)), out, state


def fla_update(case, ref_out, ref_state) -> str:
    """fla-core's update on a copy of ``case``: µs, the configuration the peer runs it at (the fastest of
    its autotuner's set for the shape, ``peers._fla_update_config``), and whether its output and state are
    within 2e-2 of exactfuse's."""
    from exactfuse.bench.peers.conv import _fla_causal_conv1d_update

    args, kwargs = clone_args(case.args, case.kwargs)
    state = _causal_conv1d_update.signature.bind(*args, **kwargs).arguments["conv_state"]
    call = _fla_causal_conv1d_update(args, kwargs)
    out = call()
    close = all(torch.allclose(x.float(), y.float(), atol=2e-2, rtol=2e-2)
                for x, y in ((out, ref_out), (state, ref_state)))  # fmt: skip
    us = TIMER(call) * 1e3
    return f"| fla {us:.1f} ({call.config})" + ("" if close else " NOT within 2e-2 of exactfuse's")


def sweep_decode(
    channels: list[int], warps: list[int], copy: float, update: bool = False, rows=(1,), paths=("", "t", "f"),
    orders=(False, True),
) -> None:  # fmt: skip
    """``--decode``: channels a program x warps x rows a program x window paths on short_conv's decode shapes
    (sweeps/conv_decode.txt); ``update``: on causal_conv1d_update's ``-lastK`` cases, beside fla-core
    (sweeps/conv_update_decode.txt)."""
    op, runner = (_causal_conv1d_update, run_update) if update else (_short_conv, run_decode)
    lines = [f"copy {copy / 1e9:,.0f} GB/s; {op.name} decode, bf16; shipped rule: heuristics.conv_config",
             "shape | BC/warps: µs (% roofline) ..., fastest first"]  # fmt: skip
    ratios: dict[tuple, list[float]] = {}
    if update:
        batches = (1, 8, 64, 256, 1024)
        ids = [f"B{B}-C10240-K4{state}" for state in ("-lastK", "") for B in batches]
        cases = _update_grid(torch.device("cuda"), torch.bfloat16, ids)
    else:
        decode = [f"decode-R{R}-{lay}" for R in (1, 8, 64, 256, 1024) for lay in ("cw", "wc")]
        cases = _short_conv_grid(torch.device("cuda"), torch.bfloat16, decode)
    for lazy in cases:
        case = lazy.materialize()
        a = op.signature.bind(*case.args, **case.kwargs).arguments
        C, K = a["weight"].shape
        head = _history_head(a["conv_state"], a["weight"], a["dilation"], a.get("history_at", "start"))
        window = head + (K - 1) * a["dilation"]
        cache = a["conv_state"]
        dense = _dense_slots(cache.stride(), window)
        shipped = heuristics.conv_config(C, window, "decode", cache.stride(1) == 1, dense)
        call, ref_out, ref_state = runner(case, shipped)
        call()
        roof = op.bytes_fn(*case.args, **case.kwargs) / copy * 1e6
        row, times = [], {}
        for bc, w, path, first, bt in itertools.product(channels, warps, paths, orders, rows):
            if path == "f" and not _dense_windows(cache.stride(), window, C, bc, cache.element_size()):
                continue  # the launcher would take the two loads: the flat run only over dense [C, W] slots
            cfg = heuristics.ConvConfig(
                BT=bt, BC=bc, BC_STATE=bc, BW=shipped.BW, num_warps=w, window_tile=path == "t",
                flat_window=path == "f", channels_first=first,
            )  # fmt: skip
            call, out, state = runner(case, cfg)
            call()
            if not (torch.equal(out, ref_out) and torch.equal(state, ref_state)):
                row.append(f"{decode_label(bc, w, path, first, bt)}: DIFFERS")
                continue
            times[(bc, w, path, first, bt)] = TIMER(call) * 1e3
        shipped_path = "f" if shipped.flat_window else ("t" if shipped.window_tile else "")
        base = times.get((shipped.BC, shipped.num_warps, shipped_path, shipped.channels_first, shipped.BT))
        for key, us in sorted(times.items(), key=lambda kv: kv[1]):
            row.append(f"{decode_label(*key)}: {us:.1f} ({100 * roof / us:.0f}%)")
            if base:
                ratios.setdefault(key, []).append(base / us)
        if update and case.id.endswith("-lastK"):  # FLA's own state; the slot cache is not one it takes
            row.append(fla_update(case, ref_out, ref_state))
        elif a["state_indices"].shape[0] <= 8:  # the small-batch target: a plain copy moving the same bytes
            src = torch.empty(op.bytes_fn(*case.args, **case.kwargs) // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            row.append(f"| copy of the same bytes: {TIMER(lambda d=dst, s=src: d.copy_(s)) * 1e3:.1f}")
        lines.append(f"{case.id} (shipped {shipped.BC}/{shipped.num_warps}) | " + " ".join(row))
        print(lines[-1], flush=True)
    ranked = sorted(ratios.items(), key=lambda kv: -geomean(kv[1]))
    lines.append("geomean speedup over the shipped rule: " + ", ".join(f"{decode_label(*k)} {geomean(v):.2f}"
                                                                      for k, v in ranked))  # fmt: skip
    emit("conv_update_decode.txt" if update else "conv_decode.txt", lines)


def decode_label(bc: int, warps: int, path: str, channels_first: bool, rows: int = 1) -> str:
    """``BC/warps``, with ``t`` when the window is held in registers (``ConvConfig.window_tile``), ``f`` when
    the block's windows move as one flat run (``ConvConfig.flat_window``), ``c`` on the grid whose
    consecutive programs take one row's channel blocks (``ConvConfig.channels_first``), and ``rN`` for ``N``
    rows a program (``ConvConfig.BT``)."""
    return f"{bc}/{warps}{path}" + ("c" if channels_first else "") + (f"r{rows}" if rows > 1 else "")


def floor(case, copy: float) -> str:
    """One line: the shipped tile and FLA on ``case``, with the SiLU and without an activation."""
    from exactfuse.bench.peers.conv import _fla_causal_conv1d

    roof = _causal_conv1d.bytes_fn(*case.args, **case.kwargs) / copy * 1e6
    a = _causal_conv1d.signature.bind(*case.args, **case.kwargs).arguments
    C, K = a["weight"].shape
    shipped = heuristics.conv_config(C, K - 1, "prefill")
    cells = []
    for activation in ("silu", None):
        bound = _causal_conv1d.signature.bind(*case.args, **case.kwargs)
        bound.arguments["activation"] = activation
        variant = type(case)(case.id, bound.args, bound.kwargs)
        ours, out, _ = run(variant, shipped)
        ours()
        fla = _fla_causal_conv1d(*clone_args(variant.args, variant.kwargs))
        fla_out = fla()
        close = torch.allclose(fla_out.float(), out.float(), atol=2e-2, rtol=2e-2)
        for name, call in (("exactfuse", ours), ("fla", fla)):
            us = TIMER(call) * 1e3
            cells.append(f"{name} {activation or 'none'} {us:.1f} ({100 * roof / us:.0f}%)")
        cells[-1] += "" if close else " (FLA's output is not within 2e-2)"
    return f"{case.id} | roofline {roof:.1f} | " + " | ".join(cells)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--tiles", default=DEFAULT_TILES)
    parser.add_argument("--warps", help="warps to time (default 4,8; with --decode 1,2,4,8)")
    parser.add_argument("--floor", action="store_true", help="also the SiLU's cost, beside FLA (conv_floor.txt)")
    parser.add_argument("--decode", action="store_true", help="short_conv decode: channels x warps (conv_decode.txt)")
    update_help = "causal_conv1d_update on FLA's state, beside fla-core (conv_update_decode.txt)"
    parser.add_argument("--update", action="store_true", help=update_help)
    parser.add_argument("--channels", default="64,128,256", help="--decode, --update: channels a program")
    parser.add_argument("--rows", default="1", help="--decode, --update: rows a program (ConvConfig.BT)")
    parser.add_argument("--paths", default=",t,f", help="--decode, --update: window paths ('', t, f)")
    parser.add_argument("--orders", default="p,c", help="--decode, --update: grid orders (p plain, c channels first)")
    opts = parser.parse_args()
    copy = measure_copy_bandwidth(torch.device("cuda"))
    if opts.decode or opts.update:
        warps = [int(w) for w in (opts.warps or "1,2,4,8").split(",")]
        rows = [int(r) for r in opts.rows.split(",")]
        orders = [{"p": False, "c": True}[o] for o in opts.orders.split(",")]
        channels = [int(c) for c in opts.channels.split(",")]
        sweep_decode(channels, warps, copy, opts.update, rows, opts.paths.split(","), orders)
        return
    tiles = [parse_tile(t) for t in opts.tiles.split(",")]
    warps = [int(w) for w in (opts.warps or "4,8").split(",")]
    h = heuristics
    shipped_tile = label(h.TILE_ROWS, h.TILE_CHANNELS, h.TILE_UNROLL, True, h.NUM_WARPS)
    lines = [f"copy {copy / 1e9:,.0f} GB/s; shipped tile {shipped_tile}", "shape | BTxBC/warps: µs (% roofline) ..."]
    ratios: dict[tuple, list[float]] = {}
    floors = [f"copy {copy / 1e9:,.0f} GB/s; shipped tile, causal_conv1d prefill, bf16, slot cache",
              "shape | copy roofline µs | provider activation µs (% roofline) ..."]  # fmt: skip
    for lazy in _causal_grid(torch.device("cuda"), torch.bfloat16):
        case = lazy.materialize()
        if opts.floor:
            floors.append(floor(case, copy))
            print(floors[-1], flush=True)
        a = _causal_conv1d.signature.bind(*case.args, **case.kwargs).arguments
        C, K = a["weight"].shape
        shipped = heuristics.conv_config(C, K - 1, "prefill")
        call, ref_out, ref_state = run(case, shipped)
        call()
        roof = _causal_conv1d.bytes_fn(*case.args, **case.kwargs) / copy * 1e6
        row, times = [], {}
        for (bt, bc, u, lean), w in itertools.product(tiles, warps):
            cfg = heuristics.ConvConfig(BT=bt, BC=bc, BC_STATE=shipped.BC_STATE, BW=shipped.BW, num_warps=w, unroll=u,
                                        lean=lean)  # fmt: skip
            call, out, state = run(case, cfg)
            call()
            if not (torch.equal(out, ref_out) and torch.equal(state, ref_state)):
                row.append(f"{label(bt, bc, u, lean, w)}: DIFFERS")
                continue
            times[(bt, bc, u, lean, w)] = TIMER(call) * 1e3
        base = times.get((shipped.BT, shipped.BC, shipped.unroll, shipped.lean, shipped.num_warps))
        for key, us in sorted(times.items(), key=lambda kv: kv[1]):
            row.append(f"{label(*key)}: {us:.1f} ({100 * roof / us:.0f}%)")
            if base:
                ratios.setdefault(key, []).append(base / us)
        lines.append(f"{case.id} | " + " ".join(row))
        print(lines[-1], flush=True)
    ranked = sorted(ratios.items(), key=lambda kv: -geomean(kv[1]))
    lines.append("geomean speedup over the shipped tile: " + ", ".join(f"{label(*k)} {geomean(v):.2f}"
                                                                       for k, v in ranked))  # fmt: skip
    emit("conv_tiles.txt", lines)
    if opts.floor:
        emit("conv_floor.txt", floors)


if __name__ == "__main__":
    main()

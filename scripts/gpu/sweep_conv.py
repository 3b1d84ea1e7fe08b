"""The conv family's launch configurations on its bench shapes (bf16), each checked bit for bit (output and state)
against the shipped rule's first: µs, % of the copy roofline, geomean against the shipped one. Default: the
prefill tile ``BTxBC[uU][g]`` (``uU``: ``ConvConfig.unroll``; ``g``: no lean kernel) x ``--warps`` on causal_conv1d
(sweeps/conv_tiles.txt; ``--fn``: on causal_conv1d_fn's grid, the stateless prefill, FLA's own call beside,
conv_fn_tiles.txt; ``--short``: on short_conv's prefill cases, K = 4 at dilation 3 with both residuals,
conv_short_tiles.txt; ``--floor``: also the shipped tile and fla-core's conv with the SiLU and without,
conv_floor.txt). ``--decode`` (short_conv) and ``--update`` (causal_conv1d_update, beside fla-core's update on
its ``-lastK`` cases): ``--channels`` a program x ``--warps`` x ``--paths`` (``t`` window in registers, ``f`` flat
run) x ``--orders`` (``c``: ``channels_first``) x ``--rows`` a program (conv_decode.txt, conv_update_decode.txt)."""

import argparse
import itertools
import re

import torch
from common import device_line, emit, geomean, ints, time_us

from exactfuse.bench.peers.conv import _fla_causal_conv1d, _fla_causal_conv1d_fn, _fla_causal_conv1d_update
from exactfuse.ops.conv import _causal_conv1d, _causal_conv1d_fn, _causal_conv1d_update, _short_conv, calls, heuristics
from exactfuse.ops.conv.launch import _dense_slots, _dense_windows, _history_head, launch_conv
from exactfuse.testing import clone_args
from exactfuse.testing.cases.conv_grids import _causal_grid, _fn_grid, _short_conv_grid, _update_grid

SHORT_PREFILL = ("prefill-L1024x1", "prefill-L4096x1", "prefill-L8192x1", "prefill-L8192x8")  # _short_conv_grid's
DEFAULT_TILES = "16x128,32x128,16x128u4,16x128u8,16x256u8,8x512u8,32x64u8,32x128u8,64x64u8,32x128u16,16x128g"
CALLS = {"short_conv": calls.short_conv_call, "causal_conv1d": calls.causal_conv1d_call,
         "causal_conv1d_update": calls.causal_conv1d_update_call,
         "causal_conv1d_fn": lambda x, w, b, act, d, qsl, seq_idx, init: calls.causal_conv1d_call(
             x, w, b, act, d, None, qsl, None, None, -1, seq_idx)}  # fmt: skip


def arguments(op, args, kwargs) -> dict:
    bound = op.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def launch(op, case, config):
    """``op``'s launch on a copy of ``case`` at ``config``, run once: (call, output (short_conv: the residual),
    state)."""
    a = arguments(op, *clone_args(case.args, case.kwargs))
    head = _history_head(a.get("conv_state"), a["weight"], a["dilation"], a.pop("history_at", "start"))  # as launched
    call, out = CALLS[op.name](*a.values()), a["residual"] if op is _short_conv else torch.empty_like(a["x"])
    view = None if op is _short_conv else out.view(call.x.shape)
    run = lambda: launch_conv(call, out=view, config=config, head=head)  # noqa: E731
    run()
    return run, out, a.get("conv_state", out)


def sweep_case(op, case, shipped, shipped_key, configs: dict, label, copy: float, ratios: dict) -> list[str]:
    """Each of ``configs`` on ``case``, checked against ``shipped``'s bits: cells fastest first."""
    _, ref_out, ref_state = launch(op, case, shipped)
    roof = op.bytes_fn(*case.args, **case.kwargs) / copy * 1e6
    row, times = [], {}
    for key, config in configs.items():
        call, out, state = launch(op, case, config)
        if torch.equal(out, ref_out) and torch.equal(state, ref_state):
            times[key] = time_us(call, rep_ms=10)
        else:
            row.append(f"{label(*key)}: DIFFERS")
    for key, us in sorted(times.items(), key=lambda kv: kv[1]):
        row.append(f"{label(*key)}: {us:.1f} ({100 * roof / us:.0f}%)")
        if shipped_key in times:
            ratios.setdefault(key, []).append(times[shipped_key] / us)
    return row


def ranked(ratios: dict, label, what: str) -> str:
    cells = [f"{label(*k)} {geomean(v):.2f}" for k, v in sorted(ratios.items(), key=lambda kv: -geomean(kv[1]))]
    return f"geomean speedup over the shipped {what}: " + ", ".join(cells)


def tile_label(bt: int, bc: int, unroll: int, lean: bool, warps: int) -> str:
    return f"{bt}x{bc}" + (f"u{unroll}" if unroll > 1 else "") + ("" if lean else "g") + f"/{warps}"


def decode_label(bc: int, warps: int, path: str, channels_first: bool, rows: int) -> str:
    return f"{bc}/{warps}{path}" + ("c" if channels_first else "") + (f"r{rows}" if rows > 1 else "")


def floor(case, shipped, copy: float) -> str:
    """The shipped tile and fla-core's conv on ``case``, each with the SiLU and without an activation."""
    roof, cells = _causal_conv1d.bytes_fn(*case.args, **case.kwargs) / copy * 1e6, []
    for activation in ("silu", None):
        bound = _causal_conv1d.signature.bind(*case.args, **case.kwargs)
        bound.arguments["activation"] = activation
        ours, out, _ = launch(_causal_conv1d, type(case)(case.id, bound.args, bound.kwargs), shipped)
        fla = _fla_causal_conv1d(*clone_args(bound.args, bound.kwargs))
        close = torch.allclose(fla().float(), out.float(), atol=2e-2, rtol=2e-2)
        for name, call in (("exactfuse", ours), ("fla", fla)):
            us = time_us(call, rep_ms=10)
            cells.append(f"{name} {activation or 'none'} {us:.1f} ({100 * roof / us:.0f}%)")
        cells[-1] += "" if close else " (FLA's output is not within 2e-2)"
    return f"{case.id} | roofline {roof:.1f} | " + " | ".join(cells)


def decode(opts, copy: float, line: str) -> None:
    op = _causal_conv1d_update if opts.update else _short_conv
    if opts.update:
        ids = [f"B{B}-C10240-K4{state}" for state in ("-lastK", "") for B in (1, 8, 64, 256, 1024)]
        cases = _update_grid(torch.device("cuda"), torch.bfloat16, ids)
    else:
        ids = [f"decode-R{R}-{lay}" for R in (1, 8, 64, 256, 1024) for lay in ("cw", "wc")]
        cases = _short_conv_grid(torch.device("cuda"), torch.bfloat16, ids)
    lines, ratios = [f"{line}; {op.name} decode, bf16", "shape | BC/warps: µs (% roofline) ..., fastest first"], {}
    grid = list(itertools.product(ints(opts.channels), ints(opts.warps or "1,2,4,8"), opts.paths.split(","),
                                  [o == "c" for o in opts.orders.split(",")], ints(opts.rows)))  # fmt: skip
    for case in (lazy.materialize() for lazy in cases):
        a = arguments(op, case.args, case.kwargs)
        (C, K), cache = a["weight"].shape, a["conv_state"]
        window = _history_head(cache, a["weight"], a["dilation"], a.get("history_at")) + (K - 1) * a["dilation"]
        dense = _dense_slots(cache.stride(), window)
        shipped = heuristics.conv_config(C, window, "decode", cache.stride(1) == 1, dense)
        configs = {(bc, w, path, first, bt): heuristics.ConvConfig(
            BT=bt, BC=bc, BC_STATE=bc, BW=shipped.BW, num_warps=w, window_tile=path == "t", flat_window=path == "f",
            channels_first=first) for bc, w, path, first, bt in grid
            if path != "f" or _dense_windows(cache.stride(), window, C, bc, cache.element_size())}  # fmt: skip
        path = "f" if shipped.flat_window else ("t" if shipped.window_tile else "")
        key = (shipped.BC, shipped.num_warps, path, shipped.channels_first, shipped.BT)
        row = sweep_case(op, case, shipped, key, configs, decode_label, copy, ratios)
        if opts.update and case.id.endswith("-lastK"):  # FLA's own state; the slot cache is not one it takes
            _, ref_out, ref_state = launch(op, case, shipped)
            args, kwargs = clone_args(case.args, case.kwargs)
            fla = _fla_causal_conv1d_update(args, kwargs)
            pairs = ((fla(), ref_out), (arguments(op, args, kwargs)["conv_state"], ref_state))
            close = all(torch.allclose(x.float(), y.float(), atol=2e-2, rtol=2e-2) for x, y in pairs)
            row.append(f"| fla {time_us(fla, rep_ms=10):.1f} ({fla.config})" + ("" if close else " NOT within 2e-2"))
        elif a["state_indices"].shape[0] <= 8:  # the small-batch target: a plain copy moving the same bytes
            src = torch.empty(op.bytes_fn(*case.args, **case.kwargs) // 2, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            row.append(f"| copy of the same bytes: {time_us(lambda d=dst, s=src: d.copy_(s), rep_ms=10):.1f}")
        lines.append(f"{case.id} (shipped {shipped.BC}/{shipped.num_warps}) | " + " ".join(row))
        print(lines[-1], flush=True)
    emit("conv_update_decode.txt" if opts.update else "conv_decode.txt", [*lines, ranked(ratios, decode_label, "rule")])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiles", default=DEFAULT_TILES)
    parser.add_argument("--warps", help="warps to time (default 4,8; with --decode, --update 1,2,4,8)")
    parser.add_argument("--floor", action="store_true", help="also the SiLU's cost, beside FLA (conv_floor.txt)")
    parser.add_argument(
        "--fn", action="store_true", help="the tiles on causal_conv1d_fn's grid, FLA beside (conv_fn_tiles.txt)"
    )
    parser.add_argument(
        "--short", action="store_true", help="the tiles on short_conv's prefill cases (conv_short_tiles.txt)"
    )
    parser.add_argument("--decode", action="store_true", help="short_conv decode (conv_decode.txt)")
    parser.add_argument("--update", action="store_true", help="causal_conv1d_update (conv_update_decode.txt)")
    parser.add_argument("--channels", default="64,128,256", help="--decode, --update: channels a program")
    parser.add_argument("--rows", default="1", help="--decode, --update: rows a program (ConvConfig.BT)")
    parser.add_argument("--paths", default=",t,f", help="--decode, --update: window paths ('', t, f)")
    parser.add_argument("--orders", default="p,c", help="--decode, --update: grid orders (p plain, c channels first)")
    opts = parser.parse_args()
    line, _, copy = device_line()
    if opts.decode or opts.update:
        return decode(opts, copy, line)
    h = heuristics
    op, grid = (_causal_conv1d_fn, _fn_grid) if opts.fn else (_causal_conv1d, _causal_grid)
    if opts.short:
        op, grid = _short_conv, lambda device, dtype: _short_conv_grid(device, dtype, SHORT_PREFILL)
    tiles = [re.fullmatch(r"(\d+)x(\d+)(?:u(\d+))?(g)?", t).groups() for t in opts.tiles.split(",")]
    tiles = [(int(bt), int(bc), int(u or 1), not g) for bt, bc, u, g in tiles]
    lines = [f"{line}; {op.name} prefill, bf16; each case's shipped tile after its id",
             "shape | BTxBC/warps: µs (% roofline) ..." + (" | fla: its fastest form" if opts.fn else "")]  # fmt: skip
    floors, ratios = [f"{line}; shipped tile, causal_conv1d prefill, bf16, slot cache",
                      "shape | copy roofline µs | provider activation µs (% roofline) ..."], {}  # fmt: skip
    for case in (lazy.materialize() for lazy in grid(torch.device("cuda"), torch.bfloat16)):
        a = arguments(op, case.args, case.kwargs)
        C, K = a["weight"].shape
        shipped = h.conv_config(C, (K - 1) * a["dilation"], "prefill")
        if opts.floor and op is _causal_conv1d:
            floors.append(floor(case, shipped, copy))
            print(floors[-1], flush=True)
        configs = {(bt, bc, u, lean, w): h.ConvConfig(BT=bt, BC=bc, BC_STATE=shipped.BC_STATE, BW=shipped.BW,
                                                      num_warps=w, unroll=u, lean=lean)
                   for (bt, bc, u, lean), w in itertools.product(tiles, ints(opts.warps or "4,8"))}  # fmt: skip
        key = (shipped.BT, shipped.BC, shipped.unroll, shipped.lean, shipped.num_warps)
        row = sweep_case(op, case, shipped, key, configs, tile_label, copy, ratios)
        if opts.fn:  # FLA's own stateless call, its fastest form, checked against the shipped tile's output
            _, ref_out, _ = launch(op, case, shipped)
            fla = _fla_causal_conv1d_fn(*clone_args(case.args, case.kwargs))
            close = torch.allclose(fla().float().view_as(ref_out), ref_out.float(), atol=2e-2, rtol=2e-2)
            row.append(f"| fla {time_us(fla, rep_ms=10):.1f} ({fla.form})" + ("" if close else " NOT within 2e-2"))
        shipped_label = tile_label(shipped.BT, shipped.BC, shipped.unroll, shipped.lean, shipped.num_warps)
        lines.append(f"{case.id} (shipped {shipped_label}) | " + " ".join(row))
        print(lines[-1], flush=True)
    name = "conv_fn_tiles.txt" if opts.fn else "conv_short_tiles.txt" if opts.short else "conv_tiles.txt"
    emit(name, [*lines, ranked(ratios, tile_label, "tile")])
    if opts.floor and op is _causal_conv1d:
        emit("conv_floor.txt", floors)


if __name__ == "__main__":
    main()

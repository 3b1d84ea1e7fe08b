"""(BD, tile elements, warps) of the gated-activation kernel per (T, d), silu bf16, beside the shipped rule
(``heuristics.act_and_mul_config``); last, each configuration's geomean slowdown against the per-shape best.
Results: sweeps/act_and_mul_blocks.txt (per-configuration times) and act_and_mul_blocks_summary.txt."""

import torch
import triton
from common import emit, geomean, rotated, time_us

from exactfuse.ops.act_and_mul import gated_kernel, heuristics

# d = 768 and 13824 are not multiples of 1024: BD = 256 / 512 tile them without masked lanes
SHAPES = ((1, 768), (16, 768), (16, 4096), (16, 14336), (4096, 768), (32768, 768), (4096, 13824), (4096, 4096),
          (32768, 14336), (32768, 31))  # fmt: skip
CONFIGS = [(bd, tile, w) for bd in (256, 512, 1024, 2048) for tile in (1024, 2048, 4096) for w in (4, 8)
           if tile >= bd and tile // (32 * w) >= 4]  # fmt: skip


def time_config(sets, T: int, D: int, bd: int, tile: int, warps: int) -> float:
    bt = max(1, tile // bd)
    grid = (triton.cdiv(T, bt), triton.cdiv(D, bd))

    def body():
        for x, y in sets:
            gated_kernel.act_and_mul_kernel[grid](x, x, y, T, D, x.stride(0), x.stride(0), D, FORMULA=0, BT=bt, BD=bd,
                                         INT64_INDEX=False, JOINED=True, num_warps=warps)  # fmt: skip

    return time_us(body, len(sets))


def main() -> None:
    table, raw = {}, []
    summary = [f"{'T':>6} {'d':>6} {'best (BD,tile,w)':>20} {'us':>8} {'heuristic':>20} {'us':>8} {'x':>6}"]
    for T, d in SHAPES:
        x = dict(device="cuda", dtype=torch.bfloat16)
        sets = rotated(lambda T=T, d=d, x=x: (torch.randn(T, 2 * d, **x), torch.empty(T, d, **x)), T * d * 6)
        times = table[(T, d)] = {}
        bt, bd, w = heuristics.act_and_mul_config(d, T)  # the eager launch's tile (FORMULA 0: the exact SiLU)
        for cfg in {(min(bd_, triton.next_power_of_2(d)), tile, w_) for bd_, tile, w_ in CONFIGS} | {(bd, bt * bd, w)}:
            times[cfg] = time_config(sets, T, d, *cfg)
        ranked = sorted(times.items(), key=lambda kv: kv[1])
        raw += [f"{T} {d} {cfg} {us:.3f}" for cfg, us in ranked]
        print(f"T{T} d{d}: " + ", ".join(f"{c}={us:.2f}" for c, us in ranked[:4]), flush=True)
        best, ours = ranked[0], (bd, bt * bd, w)
        summary.append(f"{T:>6} {d:>6} {best[0]!s:>20} {best[1]:8.2f} {ours!s:>20} {times[ours]:8.2f} "
                       f"{times[ours] / best[1]:6.3f}")  # fmt: skip
    summary.append("\nconfig geomean slowdown vs per-shape best (shapes where timed):")
    scores = sorted((geomean(r := [t[c] / min(t.values()) for t in table.values()]), max(r), c)
                    for c in CONFIGS if all(c in t for t in table.values()))  # fmt: skip
    summary += [f"  {c!s:>20}  geomean {g:.3f}  worst {worst:.3f}" for g, worst, c in scores[:12]]
    emit("act_and_mul_blocks.txt", raw)
    emit("act_and_mul_blocks_summary.txt", summary)


if __name__ == "__main__":
    main()

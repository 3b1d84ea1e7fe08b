"""Nsight Compute profile of the TMA-fed fragment kernel (``probe_w4a16_tma.py``) beside the shipped one.

``bash scripts/gpu/run.sh ncu w4a16_tma [STAGES UNROLL]`` (default 6 stages of 4 chunks) profiles, at M = 1
on (K, N) = (4096, 14336) and (14336, 4096), bf16, group 128: the shipped fragment kernel at its launch rule,
then the TMA kernel at the rule's split with one tile a warp. Each output is checked first (the TMA kernel bit
for bit against ``mma.launch_fragment`` at the same split and chunks a step). ``--summary`` prints per
kernel: time, DRAM throughput, occupancy, registers, issue-slot use and the largest warp-stall reasons: does
the ring move the kernel off the long-scoreboard stalls of the register loads
(``sweeps/ncu_w4a16_fragment.txt``)?
"""

from ncu_summary import main, profile_calls

SHAPES = ((4096, 14336), (14336, 4096))


def profile() -> None:
    import sys

    import torch
    from probe_w4a16_tma import launch_tma

    from exactfuse.ops.w4a16 import fragment, mma
    from exactfuse.ops.w4a16.heuristics import fragment_config
    from exactfuse.ops.w4a16.inputs import _random_prepared

    stages, unroll = (int(v) for v in (sys.argv[1:3] if len(sys.argv) > 2 else (6, 4)))
    calls = []
    for K, N in SHAPES:
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        packed = fragment.pack(w.qweight, w.scales, w.zeros)
        a = torch.randn((1, K), dtype=torch.bfloat16, device="cuda")
        rule = fragment_config(1, N, K)
        tma = dict(warps=4, blocks=1, split=rule["split"], unroll=unroll, stages=stages)
        same = dict(warps=4, tiles=1, blocks=1, split=rule["split"], unroll=unroll)
        got = launch_tma(a, packed.words, packed.scales, None, None, **tma)
        assert torch.equal(got, mma.launch_fragment(a, packed.words, packed.scales, None, None, **same)), (K, N)
        calls += [
            lambda a=a, p=packed, kw=rule: mma.launch_fragment(a, p.words, p.scales, None, None, **kw),
            lambda a=a, p=packed, kw=tma: launch_tma(a, p.words, p.scales, None, None, **kw),
        ]
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)

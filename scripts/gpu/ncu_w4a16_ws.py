"""Nsight Compute of the warp-specialized stream-K prototype (``w4a16_ws.py``, its ``ws_config``: 4 consumer
warps, one CTA an SM, the compact scales) beside the shipped fragment kernel (its ``fragment_config``), same
weights (bf16, group 128, symmetric), at 14336 x 4096 and 4096 x 14336, M 1 and 16."""

import torch
from common import ncu_main
from w4a16_ws_launch import compact_scales, launch_ws, ws_config

from exactfuse.ops.w4a16 import fragment
from exactfuse.ops.w4a16.heuristics import fragment_config
from exactfuse.ops.w4a16.mma import launch_fragment
from exactfuse.testing.cases.w4a16 import _random_prepared


def calls() -> list:
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    out = []
    for K, N in ((14336, 4096), (4096, 14336)):
        w = _random_prepared(K, N, torch.bfloat16, "cuda")
        p = fragment.pack(w.qweight, w.scales, w.zeros)
        compact = (p.words, *compact_scales(w.scales, w.zeros))
        for M in (1, 16):
            a = torch.randn((M, K), dtype=torch.bfloat16, device="cuda")
            ws, frag = ws_config(M, N, K), fragment_config(M, N, K, sms)
            out += [lambda a=a, w=compact, c=ws: launch_ws(a, *w, None, None, **c),
                    lambda a=a, p=p, c=frag: launch_fragment(a, p.words, p.scales, None, None, **c)]  # fmt: skip
    return out


if __name__ == "__main__":
    ncu_main(calls)

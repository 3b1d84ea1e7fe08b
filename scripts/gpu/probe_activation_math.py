"""Which math reproduces eager PyTorch bit for bit? Mismatch counts per variant.

Runs each gated-activation formula variant as a Triton kernel on the same
random inputs (N elements per dtype, several magnitudes) and counts outputs
that differ from eager ``F.silu``/``F.gelu`` followed by ``*``. The shipped
kernel (exactfuse.ops.act_and_mul.triton) uses the variants marked "ours".

    PYTHONPATH=src python3 scripts/gpu/probe_activation_math.py [N]
"""

import sys

import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from triton.language.extra import libdevice

from exactfuse.ops.math import exact_erf

VARIANTS = {
    0: ("silu", "ours: x / (1 + libdevice.exp(-x)), div_rn"),
    1: ("silu", "tl.exp + div_rn"),
    2: ("silu", "libdevice.exp + fast '/'"),
    3: ("gelu_none", "libdevice erf: (x * 0.5) * (1 + erf(x * 0.70710678))"),
    4: ("gelu_none", "libdevice erf, textbook: 0.5 * x * (1 + erf(x / sqrt 2))"),
    7: ("gelu_none", "ours: CUDA 13 erff sequence, (x * 0.5) * (1 + erf(x * k))"),
    5: ("gelu_tanh", "ours: (0.5x)(1 + tanh(kBeta * fma(kKappa, x^3, x)))"),
    6: ("gelu_tanh", "no fma: kBeta * (x + kKappa * x^3), fp fusion off"),
}


@triton.jit
def _variant_kernel(p_x, p_y, n, VARIANT: tl.constexpr, BLOCK: tl.constexpr):
    o = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = o < n
    x = tl.load(p_x + o, mask=m).to(tl.float32)
    if VARIANT == 0:
        y = tl.div_rn(x, 1.0 + libdevice.exp(-x))
    elif VARIANT == 1:
        y = tl.div_rn(x, 1.0 + tl.exp(-x))
    elif VARIANT == 2:
        y = x / (1.0 + libdevice.exp(-x))
    elif VARIANT == 3:
        y = (x * 0.5) * (1.0 + libdevice.erf(x * 0.7071067811865476))
    elif VARIANT == 4:
        y = 0.5 * x * (1.0 + libdevice.erf(tl.div_rn(x, 1.4142135623730951)))
    elif VARIANT == 5:
        y = (0.5 * x) * (1.0 + libdevice.tanh(0.7978845608028654 * tl.fma(0.044715, x * x * x, x)))
    elif VARIANT == 6:
        y = (0.5 * x) * (1.0 + libdevice.tanh(0.7978845608028654 * (x + 0.044715 * (x * x * x))))
    else:
        y = (x * 0.5) * (1.0 + exact_erf(x * 0.7071067811865476))
    tl.store(p_y + o, y.to(p_y.dtype.element_ty), mask=m)


def eager(kind, x):
    if kind == "silu":
        return F.silu(x)
    return F.gelu(x, approximate=kind.removeprefix("gelu_"))


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 15_000_000
    print(f"elements per dtype: {n} (normal x 1, x 4, x 20 thirds)")
    rows = []
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        x = (
            torch.randn(n, device="cuda")
            * torch.tensor([1.0, 4.0, 20.0], device="cuda").repeat_interleave((n + 2) // 3)[:n]
        )
        x = x.to(dtype)
        for variant, (kind, label) in VARIANTS.items():
            y = torch.empty_like(x)
            fusion = variant != 6
            _variant_kernel[(triton.cdiv(n, 1024),)](x, y, n, VARIANT=variant, BLOCK=1024, enable_fp_fusion=fusion)
            ref = eager(kind, x)
            diff = int(
                (
                    y.view(torch.int16 if dtype != torch.float32 else torch.int32)
                    != ref.view(torch.int16 if dtype != torch.float32 else torch.int32)
                ).sum()
            )
            rows.append((str(dtype).removeprefix("torch."), kind, label, diff))
    print(f"{'dtype':9} {'op':10} {'variant':55} mismatches")
    for r in rows:
        print(f"{r[0]:9} {r[1]:10} {r[2]:55} {r[3]}")


if __name__ == "__main__":
    main()

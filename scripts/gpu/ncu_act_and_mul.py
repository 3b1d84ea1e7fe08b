"""Nsight Compute of silu_and_mul (T1-d768, T4096-d14336, T32768-d14336) and moe_silu_and_mul (M49152-N3072,
split) beside Inductor's kernel for ``torch.compile`` of the same spec and inputs (bf16), whose code is written
to the output folder (``inductor_<op>_<shape>.py``). Checked first: exactfuse's output against its contract
(silu_and_mul bit for bit), the compiled spec's within a bf16 rounding of it."""

import torch
from common import emit, ncu_main
from torch._inductor.utils import run_and_get_code

from exactfuse.ops.act_and_mul import native, silu_and_mul
from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul
from exactfuse.ops.moe_silu_and_mul import native as moe_native


def calls() -> list:
    cases = [(silu_and_mul, native.silu_and_mul, f"silu_and_mul_T{T}-d{d}", (T, 2 * d), ())
             for T, d in ((1, 768), (4096, 14336), (32768, 14336))]  # fmt: skip
    cases.append((moe_silu_and_mul, moe_native.moe_silu_and_mul, "moe_silu_and_mul_M49152-N3072-split",
                  (49152, 6144), (None, False)))  # fmt: skip
    out = []
    for op, spec, label, shape, rest in cases:
        args = (torch.randn(shape, dtype=torch.bfloat16, device="cuda"), *rest)
        compiled = torch.compile(spec, dynamic=False)
        inductor, code = run_and_get_code(compiled, *args)
        emit(f"inductor_{label}.py", code)
        ours = op.run_provider("triton", *args)
        assert op is not silu_and_mul or torch.equal(ours, spec(*args)), f"{label}: exactfuse and eager differ"
        torch.testing.assert_close(ours, spec(*args), rtol=1.6e-2, atol=1e-5)
        torch.testing.assert_close(inductor, ours, rtol=1.6e-2, atol=1e-5)
        out += [lambda op=op, args=args: op.run_provider("triton", *args), lambda c=compiled, args=args: c(*args)]
    return out


if __name__ == "__main__":
    ncu_main(calls)

"""Nsight Compute profile of the gated activations beside Inductor's kernels for the same spec and inputs.

``bash scripts/gpu/run.sh ncu act_and_mul`` profiles one call each (after a warm call) of exactfuse's
Triton provider and of ``torch.compile`` of the native spec where the compiled spec is ahead in the
bench results: silu_and_mul at ``T1-d768`` (launch-bound), ``T4096-d14336`` and ``T32768-d14336``
(the compiled kernel above the measured copy rate), and moe_silu_and_mul at ``M49152-N3072`` in the
split layout. It prints, per kernel, time, DRAM throughput, occupancy, registers, issue-slot use and
the largest warp-stall reasons. Inductor's generated code for each shape is written beside the logs
(``inductor_<op>_<shape>.py``), for its grid, block and eviction choices. Checked first: exactfuse's
output meets its contract against eager (silu_and_mul bit for bit, moe_silu_and_mul within a bf16
rounding) and the compiled spec's is within a bf16 rounding of it.
"""

from ncu_summary import main, profile_calls

SILU_SHAPES = ((1, 768), (4096, 14336), (32768, 14336))
MOE_SHAPES = ((49152, 3072),)


def profile() -> None:
    import torch
    from sweep_io import emit
    from torch._inductor.utils import run_and_get_code

    from exactfuse.ops.act_and_mul import native, silu_and_mul
    from exactfuse.ops.moe_silu_and_mul import moe_silu_and_mul
    from exactfuse.ops.moe_silu_and_mul import native as moe_native

    cases = [(silu_and_mul, native.silu_and_mul, f"silu_and_mul_T{T}-d{d}", (T, 2 * d), ()) for T, d in SILU_SHAPES]
    cases += [
        (moe_silu_and_mul, moe_native.moe_silu_and_mul, f"moe_silu_and_mul_M{M}-N{N}-split", (M, 2 * N), (None, False))
        for M, N in MOE_SHAPES
    ]
    calls = []
    for op, spec, label, shape, rest in cases:
        x = torch.randn(shape, dtype=torch.bfloat16, device="cuda")
        args = (x, *rest)
        compiled = torch.compile(spec, dynamic=False)
        inductor, code = run_and_get_code(compiled, *args)
        emit(f"inductor_{label}.py", code)
        ours = op.run_provider("triton", *args)
        if op is silu_and_mul:
            assert torch.equal(ours, spec(*args)), f"{label}: exactfuse and eager differ"
        torch.testing.assert_close(ours, spec(*args), rtol=1.6e-2, atol=1e-5)
        torch.testing.assert_close(inductor, ours, rtol=1.6e-2, atol=1e-5)
        calls += [lambda op=op, args=args: op.run_provider("triton", *args), lambda c=compiled, args=args: c(*args)]
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)

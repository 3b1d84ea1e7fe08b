"""Nsight Compute profile of silu_and_mul beside Inductor's kernel for the same spec and inputs.

``bash scripts/gpu/run.sh ncu act_and_mul`` profiles one call each (after a warm call) of exactfuse's
Triton provider and of ``torch.compile`` of the native spec at the bench grid's shapes where the
compiled spec is ahead (``T1-d768``: launch-bound; ``T32768-d14336``: 641 against 673 µs, the compiled
kernel above the measured copy rate) and prints, per kernel, time, DRAM throughput, occupancy,
registers, issue-slot use and the largest warp-stall reasons. Inductor's generated code for each shape
is written beside the logs (``inductor_silu_and_mul_<shape>.py``), for its grid, block and eviction
choices. Checked first: exactfuse's output equals eager's bit for bit (its contract) and the compiled
spec's is within a bf16 rounding of it (Inductor's exp and division are not ATen's).
"""

from ncu_summary import main, profile_calls

SHAPES = ((1, 768), (32768, 14336))


def profile() -> None:
    import torch
    from sweep_io import emit
    from torch._inductor.utils import run_and_get_code

    from exactfuse.ops.act_and_mul import native, silu_and_mul

    calls = []
    for T, d in SHAPES:
        x = torch.randn((T, 2 * d), dtype=torch.bfloat16, device="cuda")
        compiled = torch.compile(native.silu_and_mul, dynamic=False)
        inductor, code = run_and_get_code(compiled, x)
        emit(f"inductor_silu_and_mul_T{T}-d{d}.py", code)
        ours = silu_and_mul.run_provider("triton", x)
        assert torch.equal(ours, native.silu_and_mul(x)), f"T{T}-d{d}: exactfuse and eager differ"
        torch.testing.assert_close(inductor, ours, rtol=1.6e-2, atol=1e-5)
        calls += [lambda x=x: silu_and_mul.run_provider("triton", x), lambda x=x, c=compiled: c(x)]
    profile_calls(calls)


if __name__ == "__main__":
    main(profile)

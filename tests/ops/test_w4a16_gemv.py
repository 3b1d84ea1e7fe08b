"""The W4A16 GEMV (M <= 2): its load variants on the interpreter, its 16-bit pair arithmetic on the GPU."""

import dataclasses

import pytest
import torch

import exactfuse
from exactfuse.ops.w4a16 import CONTRACT, native
from exactfuse.ops.w4a16 import launch as w4_launch
from exactfuse.ops.w4a16.heuristics import bucket_config, with_split
from exactfuse.testing import make_generator
from exactfuse.testing.cases.w4a16 import make_case
from support.w4a16 import SHORT, gid, identity_check, record_configs


@pytest.mark.interpreter
@pytest.mark.parametrize("M", [1, 2])
@pytest.mark.parametrize("group_size", [32, 128], ids=gid)
def test_gemv_load_variants_are_bitwise_equal(group_size, M):
    """The GEMV's 64-bit activation loads and its scale tile change loads only: on the interpreter (no
    layouts, so one summation order) every combination gives the same bits, asymmetric with bias, on
    aligned activations and on ones the 64-bit loads cannot take (a row start 2 bytes past alignment, an
    odd row stride), where the launcher falls back."""
    K, N = 256, 64
    case = make_case(f"M{M}", M, K, N, torch.float16, "cpu", make_generator(4), bias=True, symmetric=False)
    a, *rest = case.args
    cfg = bucket_config("gemv", M, N, K)
    shifted = torch.empty((M, K + 1), dtype=a.dtype)[:, 1:].copy_(a)  # 2 bytes past, odd stride
    assert w4_launch.wide_activation_loads(a) and not w4_launch.wide_activation_loads(shifted)
    for x in (a, shifted):
        outs = [
            w4_launch.launch_w4a16_gemm(x, *rest, config=dataclasses.replace(cfg, wide_a=w, scale_tile=t))
            for w in (True, False)
            for t in (True, False)
        ]
        assert all(torch.equal(outs[0], o) for o in outs[1:])
        assert CONTRACT.check(outs[0], native.w4a16_gemm(x, *rest), args=(x, *rest)).passed


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("M", [1, 2])
def test_gpu_gemv_packed_math_every_row_count(M, dtype):
    """The GEMV's 16-bit pair dequantization (PTX, GPU only) at each row count: identity rows bit-exact and
    the contract with bias, unsplit and split, symmetric, asymmetric with act-order, per-channel at a K that
    is not a multiple of BK; bitwise equal to fp32 arithmetic and to one load per activation."""
    assert w4_launch.packed_math(torch.empty(0, dtype=dtype, device="cuda"))
    for K, N, g, sym, act in [
        (4096, 4096, 128, True, False),
        (2048, 1024, 32, False, True),
        (200, 136, -1, False, False),
    ]:
        for split in (1, 3):
            cfg = with_split(bucket_config("gemv1" if M == 1 else "gemv", M, N, K), K, split)
            identity_check("cuda", dtype, K, N, g, sym, act, slice(K - M, K), config=cfg)
            case = make_case(
                f"M{M}-K{K}",
                M,
                K,
                N,
                dtype,
                "cuda",
                make_generator(M),
                bias=True,
                group_size=g,
                symmetric=sym,
                act_order=act,
            )
            with exactfuse.poison_outputs(), record_configs() as seen:
                out = w4_launch.launch_w4a16_gemm(*case.args, config=cfg)
            assert seen[0].gemv
            result = CONTRACT.check(out, native.w4a16_gemm(*case.args), args=case.args)
            assert result.passed, (K, split, result.summary())
            fp32 = w4_launch.launch_w4a16_gemm(*case.args, config=dataclasses.replace(cfg, packed_math=False))
            assert torch.equal(out, fp32)  # the same dequantized values, the same sums
            narrow = w4_launch.launch_w4a16_gemm(*case.args, config=dataclasses.replace(cfg, wide_a=False))
            assert torch.equal(out, narrow)  # the same activations
            # the same scales, but Triton may lay the words out as the scales' load (sum order over the rows)
            per_column = w4_launch.launch_w4a16_gemm(*case.args, config=dataclasses.replace(cfg, scale_tile=False))
            assert CONTRACT.check(per_column, native.w4a16_gemm(*case.args), args=case.args).passed

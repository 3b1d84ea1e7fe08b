"""``w4a16_gemm`` with a group per row (``group_index``: row shards of act-order layers): the arguments'
errors, every tl.dot tile and the dense path against native, out-of-range entries."""

import dataclasses

import pytest
import torch

import exactfuse
from exactfuse.ops.w4a16 import CONTRACT, native
from exactfuse.ops.w4a16 import launch as w4_launch
from exactfuse.ops.w4a16.checks import check_w4a16_args
from exactfuse.ops.w4a16.heuristics import bucket_config, dense_config, with_split
from exactfuse.testing import make_generator

K, N = 256, 64


def _args():
    f16 = torch.float16
    return {
        "a": torch.zeros(4, K, dtype=f16),
        "qweight": torch.zeros(K // 8, N, dtype=torch.int32),
        "bias": torch.zeros(N, dtype=f16),
    }


def _row_group_args():
    args = _args()
    args.update(scales=torch.zeros(5, N, dtype=torch.float16), zeros=torch.zeros(5, N, dtype=torch.uint8), perm=None,
                group_index=torch.randint(0, 5, (K,), dtype=torch.int32), group_size=-7)  # fmt: skip
    return args


def test_group_index_arguments_name_the_argument():
    check_w4a16_args(**_row_group_args())  # any number of scale rows; group_size is not read
    i32, f16, u8 = torch.int32, torch.float16, torch.uint8
    cases = [
        ({"group_index": torch.zeros(K - 8, dtype=i32)}, r"group_index must be int32/int64 \[K\] = \[256\]"),
        ({"group_index": torch.zeros(K)}, r"group_index must be int32/int64 \[K\] = \[256\], got \[256\] torch.float"),
        ({"group_index": torch.full((K,), 5, dtype=i32)},
         r"group_index's values must be in \[0, scales.shape\[0\]\) = \[0, 5\), got 5..5"),
        ({"scales": torch.zeros(5, N + 8, dtype=f16)},
         r"scales must be \[groups, N\] = \[groups >= 1, 64\] with group_index, got \[5, 72\]"),
        ({"zeros": torch.zeros(4, N, dtype=u8)}, r"zeros must be uint8 scales' shape \[5, 64\], got \[4, 64\]"),
        ({"group_index": torch.zeros(K, dtype=i32, device="meta")}, r"group_index must be on a's device cpu, got meta"),
    ]  # fmt: skip
    for change, message in cases:
        with pytest.raises(ValueError, match=message):
            check_w4a16_args(**{**_row_group_args(), **change})


@pytest.mark.interpreter
@pytest.mark.parametrize("deterministic", [True, False], ids=["workspace", "atomic"])
def test_interpreter_a_group_per_row_on_every_tl_dot_tile_and_split(deterministic):
    """A weight with a group per row (``group_index``) through each tl.dot bucket forced, split-K with the
    fixup, a second launch and atomics included, and the dense path: the GEMM rule against native, and
    identity activations return the dequantized weight exactly on every tile."""
    from exactfuse.testing.cases.w4a16 import row_group_case

    for sym in (True, False):
        case = row_group_case("c", 19, 512, 64, 7, torch.float16, "cpu", make_generator(11), symmetric=sym, bias=True)
        a, qweight, scales, zeros, *_, g, _, group_index = case.args
        expected = native.w4a16_gemm(*case.args)
        weight = native.dequantize(qweight, scales, zeros, g, a.dtype, group_index)
        eye = torch.eye(512, dtype=a.dtype)
        configs = [bucket_config(b, 19, 64, 512) for b in ("decode", "m32", "m64", "m128")] + [dense_config()]
        configs += [with_split(bucket_config("decode", 19, 64, 512), 512, s) for s in (2, 4)]
        configs += [dataclasses.replace(configs[-1], fixup=False)]
        for cfg in configs:
            with exactfuse.poison_outputs():
                out = w4_launch.launch_w4a16_gemm(*case.args[:7], deterministic, group_index, config=cfg)
                ident = w4_launch.launch_w4a16_gemm(eye, qweight, scales, zeros, None, None, g, deterministic,
                                                    group_index, config=cfg)  # fmt: skip
            result = CONTRACT.check(out, expected, args=case.args)
            assert result.passed, f"{cfg}: {result.summary()}"
            assert torch.equal(ident, weight), f"{cfg}: identity activations do not return the weight"
        with pytest.raises(ValueError, match="group_index needs a tl.dot or the dense configuration"):
            w4_launch.launch_w4a16_gemm(a[:1], *case.args[1:8], group_index, config=bucket_config("gemv1", 1, 64, 512))


@pytest.mark.interpreter
@pytest.mark.parametrize("M", [1, 200])
def test_kernels_read_a_zero_weight_for_group_index_entries_outside_the_scales(M):
    """Past the check (a GPU caller's group_index is not range-checked per call): a row whose group is
    outside the scales' rows has weight 0 on the kernel path, never a read outside scales or zeros."""
    from exactfuse.ops.w4a16 import launch as w4_launch
    from exactfuse.ops.w4a16 import native
    from exactfuse.testing.cases.w4a16 import row_group_case

    case = row_group_case("c", M, 256, 64, 6, torch.float16, "cpu", make_generator(2), symmetric=False)
    a, qweight, scales, zeros, perm, bias, group_size, _, group_index = case.args
    bad = group_index.clone()
    bad[[3, 100]] = torch.tensor([6, -1], dtype=bad.dtype)
    out = w4_launch.launch_w4a16_gemm(a, qweight, scales, zeros, perm, bias, group_size, True, bad)
    w = native.dequantize(qweight, scales, zeros, group_size, a.dtype, bad.clamp(0, 5))
    w[[3, 100]] = 0
    torch.testing.assert_close(out, (a.float() @ w.float()).to(a.dtype), atol=2e-3, rtol=2e-3)

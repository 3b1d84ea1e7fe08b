"""The error paths of ``w4a16_gemm``'s validation that tests/ops/test_w4a16_gemm.py does not reach.

Its common path was made cheaper (host time per call); these pin the messages of the
slow paths it now takes only when an argument is wrong: a non-tensor and a tensor on another device.
"""

import pytest
import torch

from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.ops.w4a16.checks import check_w4a16_args
from exactfuse.testing import make_generator
from exactfuse.testing.cases.w4a16 import make_case

K, N, G = 256, 64, 128


def _args(device="cpu"):
    f16 = torch.float16
    return {
        "a": torch.zeros(4, K, dtype=f16, device=device),
        "qweight": torch.zeros(K // 8, N, dtype=torch.int32, device=device),
        "scales": torch.zeros(K // G, N, dtype=f16, device=device),
        "zeros": torch.zeros(K // G, N, dtype=torch.uint8, device=device),
        "perm": torch.arange(K, dtype=torch.int32, device=device),
        "bias": torch.zeros(N, dtype=f16, device=device),
        "group_size": G,
    }


def test_valid_arguments_pass():
    check_w4a16_args(**_args())
    check_w4a16_args(**_args("meta"))


@pytest.mark.parametrize("name", ["a", "qweight", "scales"])
def test_non_tensor_names_the_argument(name):
    args = _args()
    args[name] = [1.0]
    with pytest.raises(TypeError, match=rf"^w4a16_gemm: {name} must be a torch.Tensor, got list$"):
        check_w4a16_args(**args)


@pytest.mark.parametrize("name", ["qweight", "scales", "zeros", "perm", "bias"])
def test_other_device_names_the_argument(name):
    args = _args()
    args[name] = args[name].to("meta")
    with pytest.raises(ValueError, match=rf"^w4a16_gemm: {name} must be on a's device cpu, got meta$"):
        check_w4a16_args(**args)


def test_first_wrong_device_is_named():
    args = {**_args("meta"), "a": _args()["a"]}
    with pytest.raises(ValueError, match=r"^w4a16_gemm: qweight must be on a's device cpu, got meta$"):
        check_w4a16_args(**args)


@pytest.mark.interpreter
def test_triton_decline_names_the_argument_that_is_not_contiguous():
    case = make_case("M2-K256-N64", 2, 256, 64, torch.float16, "cpu", make_generator(0))
    a, qweight, *rest = case.args
    transposed = qweight.t().contiguous().t()
    reason = w4a16_gemm.providers["triton"].accepts(a, transposed, *rest)
    assert reason.startswith("qweight has strides"), reason


def test_perm_values_outside_k_are_an_error_on_the_cpu():
    case = make_case("M2-K256-N64", 2, 256, 64, torch.float16, "cpu", make_generator(0), act_order=True)
    a, qweight, scales, zeros, perm, bias, group_size = case.args
    bad = perm.clone()
    bad[3] = 256
    with pytest.raises(ValueError, match=r"perm's values must be in \[0, K\) = \[0, 256\), got 0\.\.256"):
        w4a16_gemm(a, qweight, scales, zeros, bad, bias, group_size)


@pytest.mark.interpreter
@pytest.mark.parametrize("M", [1, 5, 200], ids=["gemv", "fused", "dense"])
def test_kernels_read_zero_for_perm_entries_outside_k(M):
    """Past the check (a GPU caller's perm is not range-checked per call): an entry outside [0, K) reads
    an activation of 0 on every path, never memory outside a."""
    from exactfuse.ops.w4a16 import launch as w4_launch
    from exactfuse.ops.w4a16 import native

    case = make_case(f"M{M}-K256-N64", M, 256, 64, torch.float16, "cpu", make_generator(1), act_order=True)
    a, qweight, scales, zeros, perm, bias, group_size = case.args
    bad = perm.clone()
    bad[[3, 100]] = torch.tensor([256, -7], dtype=bad.dtype)
    out = w4_launch.launch_w4a16_gemm(a, qweight, scales, zeros, bad, bias, group_size)
    selected = a.index_select(1, bad.clamp(0, 255).long())
    selected[:, [3, 100]] = 0
    w = native.dequantize(qweight, scales, zeros, group_size, a.dtype)
    torch.testing.assert_close(out, (selected.float() @ w.float()).to(a.dtype), atol=2e-3, rtol=2e-3)

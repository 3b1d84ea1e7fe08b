"""Helpers shared by the conv parity test files (``tests/ops/test_conv_parity*.py``): the device and dtypes,
random inputs and state pools, the per-sequence reference written from the peers' documented semantics, a
provider's call and the peers' tolerances."""

from __future__ import annotations

import torch
import torch.nn.functional as F

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
DTYPES = [torch.float16, torch.float32] + ([torch.bfloat16] if DEVICE.type == "cuda" else [])
PROVIDERS = ["native", "triton"]
PEER_TOL = {torch.float32: (3e-4, 1e-3), torch.float16: (3e-3, 5e-3), torch.bfloat16: (1e-2, 5e-2)}


def randn(shape, dtype, gen):
    return torch.randn(shape, generator=gen).to(dtype).to(DEVICE)


def pool(slots, C, W, dtype, layout, gen):
    """A random state pool, logical ``[slots, C, W]``, stored ``[slots, C, W]`` or ``[slots, W, C]``."""
    if layout == "cw":
        return randn((slots, C, W), dtype, gen)
    return randn((slots, W, C), dtype, gen).transpose(1, 2)


def reference(x_seq, history, weight, bias, activation):
    """One sequence: ``x_seq [T, C]``, ``history [C, H]``. Returns the output ``[T, C]`` (conv over
    ``history ‖ x`` in fp32, SiLU in fp32, one rounding) and ``history ‖ x`` ``[C, H + T]``."""
    T, C = x_seq.shape
    full = torch.cat([history, x_seq.T], dim=1)
    conv = F.conv1d(full.float()[None], weight.float()[:, None], None if bias is None else bias.float(), groups=C)
    out = conv[0, :, -T:].T
    out = F.silu(out) if activation == "silu" else out
    return out.to(x_seq.dtype), full


def run(op, provider, *args, **kwargs):
    with op.priority([provider]):
        return op(*args, **kwargs)


def assert_close(got, expected, dtype):
    rtol, atol = PEER_TOL[dtype]
    torch.testing.assert_close(got, expected, rtol=rtol, atol=atol)

"""Helpers shared by the w4a16 test files: dtype and group-size ids, a GPTQ checkpoint, the identity check, the
configurations launches run, the wgmma kernel's test configurations."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

import exactfuse
from exactfuse.ops.w4a16 import launch as w4_launch
from exactfuse.ops.w4a16 import quantize_rtn
from exactfuse.ops.w4a16.packing import dequantize_gptq, prepare_gptq
from exactfuse.testing import make_generator

SHORT = {torch.float16: "fp16", torch.bfloat16: "bf16"}
GROUPS = [32, 64, 128, 256, -1]


def gid(g):
    return "gch" if g == -1 else f"g{g}"


def checkpoint(K, N, group_size, sym, act, fmt="v1", seed=0, dtype=torch.float16):
    """GPTQ tensors of a random ``[N, K]`` weight quantized round-to-nearest (act-order: a random order)."""
    gen = make_generator(seed)
    order = torch.randperm(K, generator=gen) if act else None
    return quantize_rtn(torch.randn((N, K), generator=gen), group_size, sym, format=fmt, order=order, scale_dtype=dtype)


def to_device(prepared, device):
    return [x.to(device) if isinstance(x, torch.Tensor) else x for x in prepared]


def identity_check(device, dtype, K, N, group_size, sym, act, rows, config=None):
    """A = rows of I: the output must be those rows of the dequantized weight, bit for bit."""
    t = checkpoint(K, N, group_size, sym, act, dtype=dtype)
    qweight, scales, zeros, perm, g = to_device(prepare_gptq(t.qweight, t.qzeros, t.scales, t.g_idx), device)
    expected = dequantize_gptq(t.qweight, t.qzeros, t.scales, t.g_idx).to(device)
    eye = torch.eye(K, dtype=dtype, device=device)[rows]
    if callable(config):
        config = config(eye.shape[0], N, K, group_size)
    with exactfuse.poison_outputs():
        out = w4_launch.launch_w4a16_gemm(eye, qweight, scales, zeros, perm, None, g, config=config)
    assert torch.equal(out, expected[rows]), (config, (out - expected[rows]).abs().max())


@contextlib.contextmanager
def record_configs() -> Iterator[list]:
    """Within it, the :class:`TileConfig` of every W4A16 launch (eager, compiled, or through a layer) is
    appended to the yielded list, as the launcher's selection function ``launch_config`` returns it.
    CUDA-graph replays launch no Python and record nothing."""
    seen, select = [], w4_launch.launch_config

    def recording(*args, **kwargs):
        seen.append(select(*args, **kwargs))
        return seen[-1]

    w4_launch.launch_config = recording
    try:
        yield seen
    finally:
        w4_launch.launch_config = select


# (rows x tiles u unroll s stages, consumer warps a partition, pipelined, consumer partitions): the wgmma
# kernel's GPU test configurations, the tiles the op routes to (heuristics.PACKED_WGMMA_TILES) among them
WGMMA_CONFIGS = [
    ("64x2u2s6", 4, False, 1),
    ("128x1u2s4", 8, False, 1),
    ("32x1u1s6", 4, False, 1),
    ("128x1u2s4", 4, False, 2),
    ("64x2u4s3", 4, False, 1),  # four chunks a step over groups of two: zero-point rows padded to 32 words
]
# the two-warpgroup consumer (``launch_packed_wgmma(..., groups=2)``, 4 warps each) compiled offline
PINGPONG_CONFIGS = ["64x2u2s6", "128x1u2s4"]

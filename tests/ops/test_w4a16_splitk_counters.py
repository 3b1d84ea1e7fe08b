"""w4a16_gemm's split-K fixup and its arrival counters (``exactfuse.ops.arrival``): left zero across
shapes and graph replays, one buffer per stream, made for torch.cuda.graph's capture stream outside any
capture."""

import dataclasses

import pytest
import torch

import exactfuse
from exactfuse.ops import arrival
from exactfuse.ops.w4a16 import launch as w4_launch
from exactfuse.ops.w4a16 import w4a16_gemm
from exactfuse.ops.w4a16.heuristics import select_config
from exactfuse.testing import make_generator
from exactfuse.testing.cases.w4a16 import make_case


@pytest.mark.gpu
def test_gpu_split_fixup_leaves_counters_zero_across_shapes():
    """Interleaved split launches of several tile counts, eager and replayed from a CUDA graph: each
    output is bitwise equal to its first run (a counter left non-zero would skip a tile's store) and
    every counter is back to zero."""
    gen = make_generator(6)
    cases = [
        make_case(f"M{M}-N{N}", M, 4096, N, torch.bfloat16, "cuda", gen) for M, N in ((1, 4096), (16, 1024), (64, 4096))
    ]
    sms = w4_launch.num_sms(torch.device("cuda"))
    # the tl.dot tiles' configurations (the rule's without the staged tile, which has no counters)
    configs = [select_config(c.args[0].shape[0], c.args[1].shape[1], 4096, 128, sms) for c in cases]
    assert all(cfg.split_k > 1 and not cfg.staged for cfg in configs), configs

    def run(order):
        return [w4_launch.launch_w4a16_gemm(*cases[i].args, config=configs[i]) for i in order]

    forward = range(len(cases))
    first = run(forward)
    for case, cfg, out in zip(cases, configs, first, strict=True):  # fixup and two-launch reduction: the same sums
        other = dataclasses.replace(cfg, fixup=not cfg.fixup)
        assert torch.equal(out, w4_launch.launch_w4a16_gemm(*case.args, config=other))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run(forward)
    for _ in range(5):
        with exactfuse.poison_outputs():
            again = run(reversed(forward))[::-1]
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
        assert all(torch.equal(x, y) for x, y in zip(first, captured, strict=True))
    assert not any(b.any() for buffers in arrival._COUNTERS.values() for b in buffers)


@pytest.mark.gpu
def test_gpu_split_fixup_on_a_side_stream_has_its_own_counters():
    """Counters are per stream (the raw handle): a side stream's launches use their own buffer, which they
    leave zero, and give the default stream's result."""
    case = make_case("M1", 1, 4096, 4096, torch.bfloat16, "cuda", make_generator(9))
    first = w4a16_gemm(*case.args)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        outs = [w4a16_gemm(*case.args) for _ in range(3)]
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    assert all(torch.equal(first, o) for o in outs)
    key = (first.device, side.cuda_stream)
    assert key in arrival._COUNTERS and not any(b.any() for b in arrival._COUNTERS[key])


@pytest.mark.gpu
def test_gpu_capture_on_torchs_capture_stream_uses_cached_counters():
    """Warmed up on the current stream, then captured with ``torch.cuda.graph(g)`` (its shared capture
    stream): the capture reads the counters made for that stream outside the capture, not a buffer of
    its own per launch, and the replay gives the eager result."""
    case = make_case("M1", 1, 4096, 4096, torch.bfloat16, "cuda", make_generator(11))
    first = w4a16_gemm(*case.args)
    device = first.device
    graph = torch.cuda.CUDAGraph()
    seen = []
    with torch.cuda.graph(graph):
        key = (device, torch._C._cuda_getCurrentRawStream(device.index))
        seen.append(arrival.arrival_counters(device, 1).data_ptr())
        captured = w4a16_gemm(*case.args)
    assert key in arrival._COUNTERS and seen[0] == arrival._COUNTERS[key][-1].data_ptr()
    for _ in range(3):
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(captured, first)
    assert not arrival._COUNTERS[key][-1].any()

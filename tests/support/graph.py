"""CUDA-graph capture for the GPU tests: warm a step up on a side stream, then capture it."""

from __future__ import annotations

import torch


def capture(step):
    """Run ``step()`` once on a side stream (so that everything it compiles or allocates lazily happens
    outside the capture), then capture it in a CUDA graph: ``(graph, the captured call's outputs)``."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        step()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    return graph, out

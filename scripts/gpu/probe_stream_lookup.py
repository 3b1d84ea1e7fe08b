"""Host cost of looking up the current CUDA stream, as the split-K arrival counters do per launch:
``torch.cuda.current_stream(device).cuda_stream`` against ``torch._C._cuda_getCurrentRawStream(index)``
(the two must agree, on the default stream and on a side stream).

    PYTHONPATH=src python3 scripts/gpu/probe_stream_lookup.py

Result: benchmarks/results/h200/sweeps/w4a16_stream_lookup.txt.
"""

import os
import sys
import timeit

import torch

sys.path.insert(0, os.path.dirname(__file__))
from sweep_io import emit


def main() -> None:
    dev = torch.device("cuda", torch.cuda.current_device())
    side = torch.cuda.Stream(dev)
    for stream in (torch.cuda.current_stream(dev), side):
        with torch.cuda.stream(stream):
            assert torch.cuda.current_stream(dev).cuda_stream == torch._C._cuda_getCurrentRawStream(dev.index)
    n = 100_000
    obj = min(timeit.repeat(lambda: torch.cuda.current_stream(dev).cuda_stream, number=n, repeat=5)) / n
    raw = min(timeit.repeat(lambda: torch._C._cuda_getCurrentRawStream(dev.index), number=n, repeat=5)) / n
    emit(
        "probe_stream_lookup.txt",
        [
            f"current_stream(device).cuda_stream {obj * 1e6:.3f} µs, "
            f"_cuda_getCurrentRawStream {raw * 1e6:.3f} µs per call"
        ],
    )


if __name__ == "__main__":
    main()

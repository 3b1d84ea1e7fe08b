"""Benchmark harness of ``exactfuse bench`` (the command itself: ``exactfuse_cli.bench``).

Each op declares its shape grids (``op.grid("default")``, ``op.grid("quick")``)
and its cost (``op.cost(bytes=..., flops=...)``). For every case the harness
checks each provider against native (exactfuse providers by the op's
contract, baselines by the dtype Tolerance), then times with CUDA-graph
replay, rotating inputs through enough buffers to defeat the L2, and reports
µs, speedups vs ``native`` / ``native-compiled`` / peers and % of a roofline
measured in the same run.

Modules: ``runner`` (the loop), ``gate`` (correctness before timing),
``timing``, ``roofline``, ``resources`` (registers/spills of Triton kernels),
``peers`` (adapters for other libraries), ``results`` (rows, summary,
CSV/JSON), ``display`` (rich), ``plot``, ``warm`` (the warm-up that compiles in
worker processes before the timing pass).
"""

from exactfuse.bench.peers import PEERS, PeerAdapter, register_peer
from exactfuse.bench.results import Row, summarize, write_op_results
from exactfuse.bench.roofline import Roofline
from exactfuse.bench.runner import BenchConfig, Candidates, bench_op, expand_grid

__all__ = [
    "PEERS",
    "BenchConfig",
    "Candidates",
    "PeerAdapter",
    "Roofline",
    "Row",
    "bench_op",
    "expand_grid",
    "register_peer",
    "summarize",
    "write_op_results",
]

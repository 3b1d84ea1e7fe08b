"""The bench harness on the GPU: real timer, roofline and Triton kernel metadata (quick grid)."""

from __future__ import annotations

import pytest
import torch

from exactfuse.bench import resources
from exactfuse.bench.runner import BenchConfig, bench_op
from exactfuse.bench.timing import recompile_limits
from exactfuse.registry import OPS


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["silu_and_mul", "gelu_and_mul"])
def test_quick_grid_on_the_gpu(name):
    """Real timer, roofline and Triton kernel metadata (Triton's cache layout of this version)."""
    from exactfuse.bench.roofline import measure_roofline
    from exactfuse.bench.timing import cudagraph_timer, l2_cache_bytes

    device = torch.device("cuda", torch.cuda.current_device())
    roof = measure_roofline(device, matmul=False)
    assert 1e11 < roof.copy_bytes_per_s < 2e13, roof
    config = BenchConfig(grid="quick", dtypes=(torch.bfloat16,), device=str(device), l2_bytes=l2_cache_bytes(device))
    with recompile_limits():
        rows = bench_op(OPS[name], torch.bfloat16, config, timer=cudagraph_timer(5.0), roofline=roof)
    for row in rows:
        assert row.status in ("ok", "reference", "inexact"), (row.provider, row.status, row.note)
        assert row.time_us > 0 and 0 < row.pct_roofline < 300 and row.buffers >= 1
        if row.kind == "exactfuse":
            assert (row.status, row.max_ulp) == ("ok", 0)
            assert all(k["n_regs"] and k["n_spills"] is not None and k["shared"] is not None for k in row.kernels)
    assert {"triton", "native", "native-compiled"} <= {r.provider for r in rows}
    compiled = resources.snapshot(OPS[name].providers["triton"].kernels)
    described = [resources.describe(c) for c in compiled.values()]
    assert described and all(d is not None and d.n_regs > 0 for d in described)

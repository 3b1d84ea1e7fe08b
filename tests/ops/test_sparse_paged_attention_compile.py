"""sparse_paged_attention under torch.compile (dynamic rows, guard-free), export and CUDA graphs: the op is
opaque, so one graph serves every row count and its launcher's choice is made per call."""

import pytest
import torch
from torch._dynamo.decorators import mark_unbacked
from torch._dynamo.testing import CompileCounterWithBackend

import exactfuse
from exactfuse.ops.sparse_paged_attention import merge_kernel, partial_kernel
from exactfuse.testing import CompileWatch
from support.attention import CPU, CUDA, assert_contract, case_args, named, op, with_args


def _public(args):
    """The op as a model calls it: rows (q, indices, requests, gate) vary, the cache and table are the layer's."""
    a = named(args)
    k, v, table = a.k_cache, a.v_cache, a.block_table
    return lambda q, idx, t2r, gate: exactfuse.sparse_paged_attention(q, k, v, idx, table, t2r, output_gate=gate)


def _row_inputs(args):
    return args[1], args[4], args[6], args[9]


def _assert_public_contract(args, fn_inputs, got, where):
    q, idx, t2r, gate = fn_inputs
    full = with_args(args, q=q, logical_indices=idx, token_to_req=t2r, output_gate=gate, out=torch.empty_like(q))
    assert_contract(full, got, where)


def _rows_cases(rows_list, device, dtype, **kw):
    """Calls of one layer (one cache) at several row counts: the first case's cache and table, fresh rows."""
    base = case_args(rows=max(rows_list), dtype=dtype, device=device, seed=11, **kw)
    for rows in rows_list:
        yield rows, tuple(t[:rows] for t in _row_inputs(base)), base


def _assert_no_recompile(cases, compiled, counter):
    frames = None
    for rows, inputs, base in cases:
        for t in inputs:
            mark_unbacked(t, 0)  # no 0/1 specialization: rows = 1 must not recompile
        _assert_public_contract(base, inputs, compiled(*inputs), f"compiled, rows = {rows}")
        # the first trace may restart once (a float argument specialized); no later call compiles
        frames = frames or counter.frame_count
        assert counter.frame_count == frames, f"recompiled at rows = {rows}"


@pytest.mark.interpreter
def test_interpreter_compile_dynamic_rows_never_recompiles_and_exports():
    rows_list = (8, 1, 5, 13, 20)
    cases = list(_rows_cases(rows_list, CPU, torch.float16, Hq=4, Hkv=1, D=16, W=40))
    fn = _public(cases[0][2])
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    with op.priority(["triton"]):
        compiled = torch.compile(fn, dynamic=True, fullgraph=True, backend=counter)
        _assert_no_recompile(cases, compiled, counter)
        exported = torch.export.export(_Module(fn), cases[0][1],
                                       dynamic_shapes=(tuple({0: torch.export.Dim("rows", min=1, max=65536)}
                                                             for _ in range(4)),))  # fmt: skip
        for rows, inputs, base in cases:
            _assert_public_contract(base, inputs, exported.module()(*inputs), f"exported, rows = {rows}")


class _Module(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *inputs):
        return self.fn(*inputs)


@pytest.mark.gpu
@torch.no_grad()
def test_gpu_warmup_then_cuda_graphs_compile_nothing_and_replay_eager():
    base = case_args(rows=1024, Hq=24, Hkv=2, D=256, page=1600, W=2051, dtype=torch.bfloat16, device=CUDA, seed=5)
    fresh = case_args(rows=1024, Hq=24, Hkv=2, D=256, page=1600, W=2051, dtype=torch.bfloat16, device=CUDA, seed=6)
    a = named(base)
    layer = {"num_heads": 24, "num_kv_heads": 2, "head_dim": 256, "width": 2051, "k_cache": a.k_cache,
             "v_cache": a.v_cache}  # fmt: skip
    exactfuse.warmup(["sparse_paged_attention"], attention_layers=(layer,))
    watch = CompileWatch(partial_kernel.sparse_attention_partial_kernel, merge_kernel.sparse_attention_merge_kernel)
    fn = _public(base)
    for rows in (1, 64, 1024):
        inputs = [t[:rows].clone() for t in _row_inputs(base)]
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            result = fn(*inputs)
        for t, new in zip(inputs, _row_inputs(fresh), strict=True):
            t.copy_(new[:rows])
        graph.replay()
        assert torch.equal(result, fn(*inputs)), f"rows = {rows}"
    assert watch.new() == [[], []], f"compiled during capture:\n{watch}"


@pytest.mark.gpu
def test_gpu_compile_dynamic_rows_guard_free_and_export():
    rows_list = (8, 1, 7, 64, 257, 1024, 2048)
    cases = list(_rows_cases(rows_list, CUDA, torch.bfloat16, Hq=24, Hkv=2, D=256, page=1600, W=2051))
    fn = _public(cases[0][2])
    torch._dynamo.reset()
    counter = CompileCounterWithBackend("inductor")
    compiled = torch.compile(fn, dynamic=True, fullgraph=True, backend=counter)
    _assert_no_recompile(cases, compiled, counter)
    for traced in (cases[1], cases[-1]):
        torch._dynamo.reset()
        free = torch.compile(fn, dynamic=True, fullgraph=True,
                             options={"guard_filter_fn": torch.compiler.skip_all_guards_unsafe})  # fmt: skip
        free(*traced[1])
        for rows, inputs, base in cases:
            _assert_public_contract(base, inputs, free(*inputs), f"guard-free from {traced[0]}, rows = {rows}")
    dims = tuple({0: torch.export.Dim("rows", min=1, max=65536)} for _ in range(4))
    exported = torch.export.export(_Module(fn), cases[0][1], dynamic_shapes=(dims,)).module()
    for rows, inputs, base in cases:
        _assert_public_contract(base, inputs, exported(*inputs), f"exported, rows = {rows}")

"""Every registered op is a torch.library op: opcheck, torch.compile, make_fx.

Parametrized over the registry, so each new op is covered when it is declared.
"""

import pytest
import torch
from torch._subclasses.functional_tensor import dispatch_functionalize
from torch.fx.experimental.proxy_tensor import make_fx

import exactfuse  # noqa: F401  (declares the ops)
from exactfuse.registry import OPS
from exactfuse.registry.library import registers_opaque

OP_NAMES = sorted(OPS)


def _case(op, device):
    dtype = torch.float32 if torch.float32 in op.dtypes else op.dtypes[0]
    if device == "cuda":
        dtype = torch.bfloat16 if torch.bfloat16 in op.dtypes else dtype
    for case in op.cases(device, dtype, quick=True):
        tensors = [a for a in (*case.args, *case.kwargs.values()) if isinstance(a, torch.Tensor)]
        if tensors and all(t.numel() for t in tensors[:1]):
            return case
    pytest.skip(f"{op.name} declares no non-empty quick case")


def _exactfuse_nodes(gm, name):
    """Calls of the op, also as the functionalized form of a mutating op (auto_functionalized(op, ...))."""

    def calls_op(n):
        target = n.args[0] if "auto_functionalized" in str(n.target) and n.args else n.target
        return f"exactfuse.{name}." in f"{target}."  # the name whole: not a prefix of another op's

    return [n for n in gm.graph.nodes if n.op == "call_function" and calls_op(n)]


def _clone(case):
    return (
        tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in case.args),
        {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in case.kwargs.items()},
    )


DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OP_NAMES)
def test_opcheck(name, device):
    op = OPS[name]
    case = _case(op, device)
    torch.library.opcheck(op.torch_op, case.args, case.kwargs)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", OP_NAMES)
def test_compile_fullgraph_equals_eager(name, device):
    """CPU: aot_eager (fast, no C++ build); CUDA: Inductor, which re-emits the Triton kernels."""
    op = OPS[name]
    case = _case(op, device)
    torch._dynamo.reset()
    backend = "inductor" if device == "cuda" else "aot_eager"
    compiled = torch.compile(lambda *a, **k: op(*a, **k), fullgraph=True, backend=backend)
    a1, k1 = _clone(case)
    a2, k2 = _clone(case)
    torch.testing.assert_close(compiled(*a1, **k1), op(*a2, **k2), rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("name", OP_NAMES)
def test_make_fx_has_one_exactfuse_node(name):
    op = OPS[name]
    case = _case(op, "cpu")
    gm = make_fx(lambda *a: op.torch_op(*a, **case.kwargs), tracing_mode="fake")(*case.args)
    assert len(_exactfuse_nodes(gm, name)) == 1, gm.code


@pytest.mark.parametrize("name", OP_NAMES)
def test_functionalized_trace_matches_compiler_kind(name):
    """Opaque ops stay one node under functionalization (what AOTAutograd sees);
    visible ops (triton_op) decompose into their body."""
    op = OPS[name]
    case = _case(op, "cpu")
    fn = dispatch_functionalize(lambda *a: op.torch_op(*a, **case.kwargs))
    gm = make_fx(fn, tracing_mode="fake")(*case.args)
    nodes = _exactfuse_nodes(gm, name)
    assert len(nodes) == (1 if registers_opaque(op) else 0), gm.code


@pytest.mark.gpu
@pytest.mark.parametrize("name", OP_NAMES)
def test_functionalized_trace_shows_triton_kernels_gpu(name):
    """On CUDA a visible op decomposes into triton_kernel_wrapper nodes Inductor can see."""
    op = OPS[name]
    case = _case(op, "cuda")
    fn = dispatch_functionalize(lambda *a: op.torch_op(*a, **case.kwargs))
    gm = make_fx(fn, tracing_mode="fake")(*case.args)
    kernels = [n for n in gm.graph.nodes if "triton_kernel_wrapper" in str(n.target)]
    if op.compiler == "visible":
        assert kernels and not _exactfuse_nodes(gm, name), gm.code
    else:
        assert not kernels and len(_exactfuse_nodes(gm, name)) == 1, gm.code


@pytest.mark.parametrize("name", OP_NAMES)
def test_calling_the_op_object_under_make_fx_records_the_op(name):
    """Fake tensors route the registry's own call through torch.ops (no inlined native)."""
    op = OPS[name]
    case = _case(op, "cpu")
    gm = make_fx(lambda *a: op(*a, **case.kwargs), tracing_mode="fake")(*case.args)
    assert len(_exactfuse_nodes(gm, name)) == 1, gm.code


def test_import_registers_visible_ops_without_importing_inductor():
    """``import exactfuse`` (no interpreter: every visible op a ``triton_op``) leaves Inductor and Dynamo
    unimported, and torch's list of the kernels written in each body is there and empty, as it was when
    the body was a function torch parsed."""
    import json
    import os
    import subprocess
    import sys

    script = (
        "import sys, json, exactfuse, torch._library.triton as t;"
        "print(json.dumps([sorted(m for m in ('torch._inductor', 'torch._dynamo') if m in sys.modules),"
        " {n: len(v) for n, v in t.triton_ops_to_kernels.items() if n.startswith('exactfuse::')}]))"
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    imported, kernels = json.loads(done.stdout.strip().splitlines()[-1])
    visible = {f"exactfuse::{name}" for name, op in OPS.items() if op.compiler == "visible"}
    assert imported == []
    assert visible and set(kernels) == visible and not any(kernels.values())

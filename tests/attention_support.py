"""Helpers shared by the sparse_paged_attention test files: cases as argument tuples, by-name access,
runs into a NaN-filled ``out``, the contract check."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from exactfuse.ops.sparse_paged_attention import CONTRACT, _sparse_paged_attention
from exactfuse.ops.sparse_paged_attention import inputs as attn_inputs
from exactfuse.ops.sparse_paged_attention import triton as at
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.testing import make_generator

op = _sparse_paged_attention
CUDA = torch.device("cuda")
CPU = torch.device("cpu")


def case_args(rows=9, Hq=6, Hkv=1, D=32, page=16, W=70, dtype=torch.float16, device=CPU, seed=0, **kw):
    gen = make_generator(seed)
    return attn_inputs.attention_case("c", rows, Hq, Hkv, D, page, W, dtype=dtype, device=device, gen=gen, **kw).args


def named(args: tuple) -> SimpleNamespace:
    """A call's arguments by name (``a.q``, ``a.k_cache``, ...)."""
    return SimpleNamespace(**dict(zip(op.signature.parameters, args, strict=True)))


def with_args(args: tuple, **changes) -> tuple:
    names = list(op.signature.parameters)
    out = list(args)
    for name, value in changes.items():
        out[names.index(name)] = value
    return tuple(out)


def run(args: tuple, config: AttentionConfig | None = None, provider: str = "triton") -> torch.Tensor:
    """The op's output for ``args`` into a fresh NaN-filled ``out``."""
    out = torch.full_like(args[0], float("nan"))
    args = (out, *args[1:])
    if provider == "native":
        op.native(*args)
    elif config is None:
        op.run_provider("triton", *args)
    else:
        op.check(*args)
        at.launch_sparse_paged_attention(*args, config=config)
    return out


def assert_contract(args: tuple, out: torch.Tensor, where: str = "") -> None:
    expected = run(args, provider="native")
    result = CONTRACT.check(out, expected, args=args)
    assert result.passed, f"{where}: {result.summary()}"
    assert not torch.isnan(out).any(), f"{where}: unwritten elements"

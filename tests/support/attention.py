"""Helpers shared by the sparse_paged_attention test files: cases as argument tuples, by-name access,
runs into a NaN-filled ``out``, the contract check, the forced split configurations and the cases with
special values."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from exactfuse.ops.sparse_paged_attention import CONTRACT, _sparse_paged_attention, heuristics, native
from exactfuse.ops.sparse_paged_attention import launch as attention_launch
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.testing import make_generator
from exactfuse.testing.cases import sparse_paged_attention as attn_inputs
from exactfuse.utils import num_sms

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
        attention_launch.launch_sparse_paged_attention(*args, config=config)
    return out


def assert_contract(args: tuple, out: torch.Tensor, where: str = "") -> None:
    expected = run(args, provider="native")
    result = CONTRACT.check(out, expected, args=args)
    assert result.passed, f"{where}: {result.summary()}"
    assert not torch.isnan(out).any(), f"{where}: unwritten elements"


def forced_configs(Hkv, D, W, device):
    """Every configuration the heuristic reaches, plus both tiles at 1, 2 and 3 splits, merged by a second
    launch and in the same launch."""
    configs = set(heuristics.reachable_configs(Hkv, D, W, num_sms(device)))
    tiles = {16, 64} if device.type == "cpu" else {32, 64}
    configs |= {AttentionConfig(b, s, fixup=f) for b in tiles for s in (1, 2, 3) for f in (False, True)
                if s <= -(-W // b)}  # fmt: skip
    return sorted(configs, key=lambda c: (c.block_n, c.num_splits, c.num_warps, c.fixup))


def specials_cases():
    """(what, args): NaN in one selected K row, Inf in one V, NaN in cache slots no valid entry reads
    (the page-0 slot masked entries stand for), and a row whose only token scores -inf."""
    base = case_args(rows=4, Hq=4, Hkv=1, D=16, page=4, W=12, seed=7, holes=0.3)
    a = named(base)
    page, slot, valid = native.physical_slots(a.logical_indices, a.block_table, a.token_to_req, None, 4,
                                              a.k_cache.shape[0])  # fmt: skip
    out = []
    k = a.k_cache.clone()
    k[page[1, valid[1]][0], slot[1, valid[1]][0], 0, 3] = float("nan")
    out.append(("nan-k", with_args(base, k_cache=k)))
    v = a.v_cache.clone()
    v[page[2, valid[2]][0], slot[2, valid[2]][0], 0, 5] = float("inf")
    out.append(("inf-v", with_args(base, v_cache=v)))
    used = set(zip(page[valid].tolist(), slot[valid].tolist(), strict=True))
    k, v = a.k_cache.clone(), a.v_cache.clone()
    for p_ in range(k.shape[0]):
        for s_ in range(k.shape[1]):
            if (p_, s_) not in used:
                k[p_, s_], v[p_, s_] = float("nan"), float("nan")
    out.append(("nan-unread", with_args(base, k_cache=k, v_cache=v)))
    idx = a.logical_indices.clone()
    idx[0] = -1
    idx[0, 5] = a.logical_indices[1, valid[1]][0]  # one token, its score -inf through q
    q = a.q.clone()
    k0 = a.k_cache[page[1, valid[1]][0], slot[1, valid[1]][0], 0].float()
    q[0, 0] = torch.where(k0 > 0, -torch.inf, torch.inf).to(q.dtype)  # -inf * k[d] on every d
    out.append(("neg-inf-row", with_args(base, q=q, logical_indices=idx)))
    return out

"""sparse_paged_attention's alternative kernel paths, each held to the other's bits: fp8 ``V`` read as
16-bit pairs against a byte at a time, the next tile's slots loaded ahead or not
(``AttentionConfig.prefetch_slots``), and the merge launch's shapes (``merge_group``, ``merge_block_d``,
``merge_warps``, ``pdl``) against the plain merge."""

from dataclasses import replace

import pytest
import torch

from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from support.attention import (
    CPU,
    CUDA,
    assert_contract,
    case_args,
    forced_configs,
    named,
    run,
    specials_cases,
    with_args,
)


def _odd_copy(cache: torch.Tensor) -> torch.Tensor:
    """``cache``'s values in a view one byte past an even address: fp8 rows read a byte at a time."""
    pages, page_size, Hkv, D = cache.shape
    flat = torch.zeros(cache.numel() + 1, dtype=torch.uint8, device=cache.device)
    odd = flat[1:].view(cache.dtype).view(pages, page_size, Hkv, D)
    odd.copy_(cache)
    return odd


def _pairs_and_bytes(kv, device):
    """Outputs of one fp8 call with V at an even address (16-bit pairs) and at an odd one (bytes), NaN in
    a few V slots, and the native output."""
    from exactfuse.ops.sparse_paged_attention.launch import _even

    args = case_args(dtype=torch.float16, kv_dtype=kv, W=70, device=device)
    v = named(args).v_cache.clone()
    v.view(torch.uint8)[0, 0, 0, :2] = 0x7F if kv == torch.float8_e4m3fn else 0x7E  # NaN in two columns of a slot
    odd = _odd_copy(v)
    assert _even(v) and not _even(odd)
    args = with_args(args, v_cache=v)
    return run(args), run(with_args(args, v_cache=odd)), run(args, provider="native")


@pytest.mark.interpreter
@pytest.mark.parametrize("kv", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_interpreter_fp8_v_read_as_pairs_equals_bytes(kv):
    """An fp8 V cache at an even address is read as 16-bit pairs (`_fp8_pairs_as_fp16`), one at an odd
    address a byte at a time; both widen exactly, so the outputs are the same bits. (The interpreter's
    e4m3 widening loses NaN on both paths; the GPU test below checks NaN positions.)"""
    pairs, single, _ = _pairs_and_bytes(kv, CPU)
    assert torch.equal(pairs.nan_to_num(7.0), single.nan_to_num(7.0))


@pytest.mark.gpu
@pytest.mark.parametrize("kv", [torch.float8_e4m3fn, torch.float8_e5m2])
def test_gpu_fp8_v_read_as_pairs_equals_bytes_and_keeps_nan(kv):
    pairs, single, native_out = _pairs_and_bytes(kv, CUDA)
    assert torch.equal(torch.isnan(pairs), torch.isnan(native_out)) and torch.isnan(pairs).any()
    assert torch.equal(pairs.nan_to_num(7.0), single.nan_to_num(7.0))


def _prefetch_and_default(args: tuple, configs) -> list[tuple]:
    """(config, output without, output with the next tile's slots loaded ahead) for each config."""
    return [
        (c, run(args, replace(c, prefetch_slots=False)), run(args, replace(c, prefetch_slots=True))) for c in configs
    ]


@pytest.mark.interpreter
def test_interpreter_prefetched_slots_are_the_default_bit_for_bit():
    """``prefetch_slots`` loads tile ``t + splits``'s slots while tile ``t`` is computed (masked past the
    end): the same tokens in the same order, so the same bits, on every split configuration, with
    counts, holes and the special values."""
    cases = [("counts", case_args(rows=5, Hq=8, Hkv=2, D=16, page=7, W=100, counts=True))]
    cases += [c for c in specials_cases() if c[0] in ("nan-k", "neg-inf-row")]
    for what, args in cases:
        configs = (
            forced_configs(2, 16, 100, CPU) if what == "counts" else [AttentionConfig(16, 1), AttentionConfig(16, 2)]
        )
        for config, default, prefetched in _prefetch_and_default(args, configs):
            assert torch.equal(default.view(torch.int16), prefetched.view(torch.int16)), (what, config)


@pytest.mark.gpu
@pytest.mark.parametrize("kv", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "e4m3"])
def test_gpu_prefetched_slots_are_the_default_bit_for_bit(kv):
    args = case_args(rows=33, Hq=12, Hkv=2, D=128, page=96, W=515, dtype=torch.bfloat16, kv_dtype=kv, device=CUDA,
                     counts=True)  # fmt: skip
    # one split, splits merged by a second launch and in the launch, the few-programs tile: the loop
    # shapes the prefetch changes (every reachable configuration is the split test's)
    configs = [AttentionConfig(32, 1), AttentionConfig(64, 3), AttentionConfig(32, 3, fixup=True),
               AttentionConfig(64, 5, num_warps=8)]  # fmt: skip
    for config, default, prefetched in _prefetch_and_default(args, configs):
        assert torch.equal(default.view(torch.int16), prefetched.view(torch.int16)), config


def _merge_shapes(config: AttentionConfig, D: int) -> list[AttentionConfig]:
    """``config`` with each merge shape the launcher takes: one split's loads at a time, a column slice a
    program (where ``D`` has two) at more warps, and every split's loads at once with that slice, launched
    as a programmatic dependent (a plain launch under the interpreter)."""
    bd = max(16, D // 2)
    return [
        replace(config, merge_group=1),
        replace(config, merge_block_d=bd, merge_warps=4),
        replace(config, merge_group=config.num_splits, merge_block_d=bd, merge_warps=4, pdl=True),
    ]


@pytest.mark.interpreter
def test_interpreter_merge_shapes_are_the_plain_merge_bit_for_bit():
    """The merge launch's shape (``merge_group``, ``merge_block_d``, ``merge_warps``, ``pdl``) changes when
    loads are issued and which program takes which columns, never the arithmetic: the same bits as the
    plain merge, and the op's contract against native, with counts, splits past the last tile (one token
    tile a program, as the rows = 1 candidates take), the gates and the special values."""
    counts = case_args(rows=3, Hq=8, Hkv=2, D=32, page=7, W=100, counts=True)
    cases = [
        ("counts", counts, [AttentionConfig(16, 3), AttentionConfig(16, 8, 8)]),
        ("eager", with_args(counts, gate_rounding="eager"), [AttentionConfig(16, 7)]),
        ("no-gate", with_args(counts, output_gate=None), [AttentionConfig(16, 7)]),
    ]
    cases += [(what, args, [AttentionConfig(16, 2)]) for what, args in specials_cases() if what != "inf-v"]
    for what, args, configs in cases:
        D = named(args).q.shape[2]
        for config in configs:
            plain = run(args, config)
            for shaped in _merge_shapes(config, D):
                out = run(args, shaped)
                assert torch.equal(out.view(torch.int16), plain.view(torch.int16)), (what, shaped)
            if what in ("counts", "eager", "no-gate"):
                assert_contract(args, plain, f"{what} {config}")


def test_merge_shape_fields_are_checked():
    with pytest.raises(ValueError, match="merge_group"):
        AttentionConfig(32, 4, merge_group=0)
    with pytest.raises(ValueError, match="merge_block_d"):
        AttentionConfig(32, 4, merge_block_d=48)


@pytest.mark.gpu
@pytest.mark.parametrize("kv", [torch.bfloat16, torch.float8_e4m3fn], ids=["bf16", "e4m3"])
def test_gpu_merge_shapes_are_the_plain_merge_bit_for_bit(kv):
    """On the GPU the programmatic dependent launch is real: its merge waits for the partials."""
    for rows, D in ((1, 256), (1, 128), (16, 128)):
        args = case_args(rows=rows, Hq=24, Hkv=2, D=D, page=1600, W=2051, dtype=torch.bfloat16, kv_dtype=kv,
                         device=CUDA, counts=True)  # fmt: skip
        for config in (
            AttentionConfig(64, 16, 8, prefetch_slots=True),
            AttentionConfig(32, 64),
            AttentionConfig(64, 3),
        ):
            plain = run(args, config)
            assert_contract(args, plain, f"R{rows} D{D} {config}")
            probed = [replace(config, pdl=True), replace(config, merge_group=config.num_splits, merge_block_d=64,
                                                         merge_warps=4, pdl=True)]  # fmt: skip
            for shaped in _merge_shapes(config, D) + probed:
                out = run(args, shaped)
                assert torch.equal(out.view(torch.int16), plain.view(torch.int16)), (rows, D, shaped)


@pytest.mark.interpreter
@pytest.mark.parametrize("group", [1, 2, 3, 8])
def test_interpreter_merge_sums_the_splits_in_split_order(group):
    """The merge kernel adds the splits' weighted partials one after another in split order, whatever its
    group: partials of 2^24, 1, 1, -2^24 at equal LSE sum to 0 in that order (each 1 is lost to rounding)
    and to 2 in any order that takes -2^24 first; a split of LSE -inf between them adds nothing."""
    from exactfuse.ops.sparse_paged_attention.merge_kernel import sparse_attention_merge_kernel

    D, splits = 16, 5
    big = 2.0**24
    part = torch.zeros(splits, 1, 1, D)
    lse = torch.full((splits, 1, 1), 3.0)
    part[:, 0, 0, :8] = torch.tensor([big, 1.0, 0.0, 1.0, -big])[:, None]
    part[:, 0, 0, 8:] = torch.tensor([-big, 1.0, 0.0, 1.0, big])[:, None]
    lse[2] = float("-inf")  # no token: its O is 0 and weighs nothing
    part[2] = float("nan")  # ... unless it counts; then every column would be NaN
    out = torch.empty(1, 1, D)
    sparse_attention_merge_kernel[(1, 1, 1)](part, lse, out, out, 1, splits, 0, 0, D, D, HQ=1, D=D, GATE=0,
                                             MERGE_GROUP=group)  # fmt: skip
    # four splits of weight 1: (2^24 + 1 + 1 - 2^24) / 4 in order is 0; -2^24 first, then 1 and 1, is 2 / 4
    assert torch.equal(out[0, 0, :8], torch.zeros(8)) and torch.equal(out[0, 0, 8:], torch.full((8,), 0.5))

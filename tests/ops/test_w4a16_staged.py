"""w4a16_gemm's multi-stage Gluon tile (``ops/w4a16/staged.py``): its configuration rule, when the launch
rule takes it, and what it refuses on the CPU; on an sm_90 GPU the contract, bit-exact dequantization,
determinism and CUDA graphs through the forced configuration, and the rule's choice and fallback."""

import dataclasses
import os
import re

import pytest
import torch

import exactfuse
from exactfuse.ops.w4a16 import CONTRACT, dequant, gemv, native, random_weights, splitk, staged, tile_kernel, w4a16_gemm
from exactfuse.ops.w4a16 import launch as w4_launch
from exactfuse.ops.w4a16.heuristics import STAGED_M, select_config, staged_config
from exactfuse.ops.w4a16.staged import staged_shape_unsupported
from exactfuse.testing import CompileWatch, make_generator
from exactfuse.testing.cases.w4a16 import make_case, row_group_case
from support.w4a16 import SHORT, gid, identity_check, record_configs

SWEEP = os.path.join(os.path.dirname(__file__), "..", "..", "benchmarks", "results", "h200", "sweeps")


def _kernel_group(K, g):
    return w4_launch.kernel_group(K, g)


def test_staged_config_takes_the_variant_measured_best():
    """The rule's split is the probe's variant it names: twice the fewest filling splits at M <= 64
    (column 4 of the probe's split list), the fewest at M = 128 (column 2)."""
    with open(os.path.join(SWEEP, "w4a16_wgmma_staged.txt")) as f:
        rows = [line for line in f if re.match(r"\d+ \| \d+ \| \d+ \|", line)]
    assert len(rows) == 20
    for line in rows:
        K, N, M = (int(x) for x in line.split("|")[:3])
        splits = [int(x) for x in re.search(r"Gluon splits ([\d/]+)", line).group(1).split("/")]
        cfg = staged_config(M, N, K, 128, 132)
        assert cfg.split_k == splits[3 if M <= 64 else 1], (K, N, M, cfg)
        assert (cfg.BN, cfg.BK, cfg.num_stages, cfg.num_warps, cfg.staged) == (64, 64, 4, 4, True)


@pytest.mark.parametrize("group_size", [128, 256, -1], ids=gid)
def test_staged_configs_cut_every_model_width(group_size):
    """Every configuration the rule gives for real layer widths cuts K into whole groups and fits the ring."""
    for K in (512, 2048, 4096, 5120, 11008, 13824, 14336, 28672):
        for N in (64, 1024, 4096, 14336):
            for M in (1, 9, 16, 33, 64, 65, 128):
                cfg = staged_config(M, N, K, group_size, 132)
                assert min(128, max(8, 1 << (M - 1).bit_length())) == cfg.BM
                assert staged_shape_unsupported(N, K, _kernel_group(K, group_size), cfg) is None, (M, N, K, cfg)


def test_staged_shape_reasons_name_what_does_not_fit():
    cfg = staged_config(16, 4096, 4096, 128, 132)
    assert "N % 64" in staged_shape_unsupported(4000, 4096, 128, cfg)
    assert "group % 64" in staged_shape_unsupported(4096, 4096, 32, cfg)
    assert "does not cut K" in staged_shape_unsupported(4096, 8192, 128, cfg)
    assert "whole groups" in staged_shape_unsupported(4096, 4096, 1024, cfg)
    wide = staged_config(16, 64, 2**17, 128, 1)
    assert "shared memory" in staged_shape_unsupported(64, 2**17, 128, wide)


def test_select_config_takes_the_staged_tile_only_on_wgmma_devices_in_its_rows():
    for M in (1, 2, 3, 8, 16, 33, 64, 128, 129, 1024):
        plain, wgmma = select_config(M, 4096, 4096, 128), select_config(M, 4096, 4096, 128, wgmma=True)
        assert not plain.staged
        if STAGED_M[0] <= M <= STAGED_M[1]:
            assert wgmma == staged_config(M, 4096, 4096, 128), M
        else:
            assert wgmma == plain, M


@pytest.mark.interpreter
def test_the_rule_keeps_the_tl_dot_tiles_where_the_staged_tile_cannot_run():
    """Off sm_90 (here the interpreter) the rule never names the staged tile."""
    case = make_case("M16", 16, 512, 128, torch.float16, "cpu", make_generator(1))
    with record_configs() as seen:
        w4_launch.launch_w4a16_gemm(*case.args)
    assert [c.name for c in seen] == ["decode"]


@pytest.mark.interpreter
def test_forcing_the_staged_tile_off_sm90_is_a_clear_error():
    case = make_case("M16", 16, 512, 128, torch.float16, "cpu", make_generator(1))
    with pytest.raises(
        ValueError, match=r"'staged' \(the multi-stage Gluon tile\) cannot run here: (.*sm_90|this Triton has no Gluon)"
    ):
        w4_launch.launch_w4a16_gemm(*case.args, config=staged_config(16, 128, 512, 128))


# ------------------------------------------------------------------ GPU
def _sm90():
    return torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0)


GPU_SHAPES = [  # (K, N, group, symmetric, act-order, bias)
    (4096, 4096, 128, False, False, True),
    (4096, 512, 128, True, True, False),
    (2048, 1024, 256, False, True, False),
    (4096, 768, -1, True, False, True),
    (14336, 4096, 128, False, False, False),
]


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
def test_gpu_staged_tile_meets_the_contract_and_repeats(dtype):
    gen = make_generator(7)
    for K, N, g, sym, act, bias in GPU_SHAPES:
        for M in (1, 5, 16, 33, 64, 100, 128):
            case = make_case(f"M{M}", M, K, N, dtype, "cuda", gen, bias=bias, group_size=g, symmetric=sym,
                             act_order=act)  # fmt: skip
            cfg = staged_config(M, N, K, g)
            out = w4_launch.launch_w4a16_gemm(*case.args, config=cfg)
            result = CONTRACT.check(out, native.w4a16_gemm(*case.args), args=case.args)
            assert result.passed, (K, N, g, M, cfg, result.summary())
            assert torch.equal(out, w4_launch.launch_w4a16_gemm(*case.args, config=cfg)), (K, N, g, M)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
@pytest.mark.parametrize("dtype", list(SHORT), ids=list(SHORT.values()))
@pytest.mark.parametrize("group_size", [128, -1], ids=gid)
def test_gpu_staged_identity_is_bit_exact(group_size, dtype):
    for sym in (False, True):
        for rows in (slice(1000, 1064), slice(0, 128), slice(4000, 4003)):
            identity_check("cuda", dtype, 4096, 512, group_size, sym, sym, rows, config=staged_config)


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
def test_gpu_staged_tile_in_a_cuda_graph_replays_as_eager():
    w = random_weights(4096, 4096, torch.bfloat16, "cuda", make_generator(5), symmetric=False)
    x = torch.randn(64, 4096, dtype=torch.bfloat16, device="cuda")
    cfg = staged_config(64, 4096, 4096, 128)

    def call():
        return w4_launch.launch_w4a16_gemm(x, w.qweight, w.scales, w.zeros, None, None, 128, config=cfg)

    eager = call()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = call()
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert not torch.equal(out, eager) and torch.equal(out, call())


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
def test_gpu_staged_tile_refuses_row_groups_and_unaligned_rows_by_name():
    case = row_group_case("M16", 16, 4096, 512, 32, torch.float16, "cuda", make_generator(2))
    with pytest.raises(ValueError, match="no group_index"):
        w4_launch.launch_w4a16_gemm(*case.args, config=staged_config(16, 512, 4096, 128))
    a = torch.randn((16, 4096 + 4), dtype=torch.float16, device="cuda")[:, 4:]  # rows 8 bytes in, 4100 apart
    w = random_weights(4096, 512, torch.float16, "cuda", make_generator(4))
    with pytest.raises(ValueError, match="16-byte aligned"):
        w4_launch.launch_w4a16_gemm(a, w.qweight, w.scales, w.zeros, None, None, 128,
                                    config=staged_config(16, 512, 4096, 128))  # fmt: skip


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
def test_gpu_the_rule_takes_the_staged_tile_and_falls_back_where_it_cannot():
    """At M 2-128 the op runs the staged tile where its arguments fit and the rule's tl.dot tile where
    they do not (N not a multiple of 64, unaligned rows, groups of 32), each through the contract."""
    gen = make_generator(12)
    aligned = make_case("M16", 16, 4096, 4096, torch.bfloat16, "cuda", gen)
    ragged = make_case("M40", 40, 4096, 4040, torch.bfloat16, "cuda", gen)
    small_groups = make_case("M64", 64, 1024, 1024, torch.bfloat16, "cuda", gen, group_size=32)
    shifted = torch.randn((100, 4096 + 8), dtype=torch.bfloat16, device="cuda")[:, 4:-4]
    unaligned = (shifted, *aligned.args[1:])
    for args, name in ((aligned.args, "staged"), (ragged.args, "m64"), (small_groups.args, "m64"),
                       (unaligned, "m128")):  # fmt: skip
        with record_configs() as seen:
            out = w4_launch.launch_w4a16_gemm(*args)
        assert [c.name for c in seen] == [name], (args[0].shape, seen)
        result = CONTRACT.check(out, native.w4a16_gemm(*args), args=args)
        assert result.passed, (name, result.summary())


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
def test_gpu_warmup_compiles_every_tile_the_rule_takes_at_any_m():
    """After ``exactfuse.warmup`` for a layer, no row count compiles a kernel (what a CUDA-graph capture
    needs): the staged tile at each of its BM and split rules, the GEMVs, the dense path."""
    K, N = 2048, 1536
    exactfuse.warmup(["w4a16_gemm"], dtypes=(torch.bfloat16,), shapes=((K, N),))
    kernels = (staged.w4a16_staged_kernel, tile_kernel.w4a16_gemm_kernel, gemv.w4a16_gemv_kernel,
               splitk.w4a16_splitk_reduce_kernel, dequant.w4a16_dequant_kernel)  # fmt: skip
    watch = CompileWatch(*kernels)
    w = random_weights(K, N, torch.bfloat16, "cuda", make_generator(13))
    with record_configs() as seen:
        for M in (1, 2, 3, 5, 8, 9, 16, 17, 31, 33, 64, 65, 100, 128, 129, 700):
            w4a16_gemm(torch.randn((M, K), dtype=torch.bfloat16, device="cuda"), w.qweight, w.scales, w.zeros,
                       w.perm, None, w.group_size)  # fmt: skip
    assert watch.new() == [[]] * len(kernels), f"compiled after the warmup:\n{watch}"
    assert {c.BM for c in seen if c.staged} == {8, 16, 32, 64, 128}, seen


@pytest.mark.gpu
@pytest.mark.skipif(not _sm90(), reason="the staged tile needs an sm_90 GPU")
def test_gpu_staged_split_fixup_repeats_and_leaves_the_counters_zero():
    """Interleaved split launches of several tile counts, the partials summed by the last split of each
    tile or by a second launch (the same bits either way), eager and replayed from a CUDA graph: each
    output bitwise its first run's, every counter back to zero."""
    from exactfuse.ops import arrival as counters

    gen = make_generator(14)
    cases = [make_case(f"M{M}", M, K, N, torch.bfloat16, "cuda", gen, bias=True, symmetric=False)
             for M, K, N in ((3, 4096, 1024), (16, 8192, 4096), (100, 4096, 512))]  # fmt: skip
    configs = [staged_config(c.args[0].shape[0], c.args[1].shape[1], c.args[0].shape[1], 128) for c in cases]
    assert all(cfg.split_k > 1 for cfg in configs) and {cfg.fixup for cfg in configs} == {True, False}, configs

    def run(order):
        return [w4_launch.launch_w4a16_gemm(*cases[i].args, config=configs[i]) for i in order]

    first = run(range(3))
    for case, cfg, out in zip(cases, configs, first, strict=True):  # in-launch or second-launch sums: one order
        assert CONTRACT.check(out, native.w4a16_gemm(*case.args), args=case.args).passed
        other = dataclasses.replace(cfg, fixup=not cfg.fixup)
        assert torch.equal(out, w4_launch.launch_w4a16_gemm(*case.args, config=other)), cfg
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = run(range(3))
    for _ in range(3):
        again = run((2, 1, 0))[::-1]
        graph.replay()
        torch.cuda.synchronize()
        assert all(torch.equal(x, y) for x, y in zip(first, again, strict=True))
        assert all(torch.equal(x, y) for x, y in zip(first, captured, strict=True))
    assert not any(b.any() for buffers in counters._COUNTERS.values() for b in buffers)

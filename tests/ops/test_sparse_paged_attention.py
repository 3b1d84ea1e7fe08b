"""sparse_paged_attention: spec, slot mapping, gate stage, contract matrix, every split configuration,
special values, errors, fallback, warmup (compile, export and CUDA graphs: test_sparse_paged_attention_compile.py)."""

import dataclasses

import pytest
import torch

import exactfuse
from exactfuse.ops import fastmath
from exactfuse.ops.sparse_paged_attention import CONTRACT, heuristics, native
from exactfuse.ops.sparse_paged_attention import warmup as attn_warmup
from exactfuse.ops.sparse_paged_attention.heuristics import AttentionConfig
from exactfuse.testing import assert_contract_matrix, make_generator
from exactfuse.utils import num_sms
from support.attention import (
    CPU,
    CUDA,
    assert_contract,
    case_args,
    forced_configs,
    named,
    op,
    run,
    specials_cases,
    with_args,
)


def _loop_reference(args: tuple) -> torch.Tensor:
    """The spec written as the obvious per-row loop (fp32): gather the valid tokens, softmax, GQA, round."""
    a = named(args)
    q, k, v, idx, table, t2r, counts, scale = (a.q, a.k_cache, a.v_cache, a.logical_indices, a.block_table,
                                               a.token_to_req, a.counts, a.scale)  # fmt: skip
    rows, Hq, D = q.shape
    pages, page_size, Hkv, _ = k.shape
    result = torch.zeros_like(q)
    for r in range(rows):
        req = int(t2r[r])
        toks = []
        for col in range(idx.shape[1] if counts is None else max(0, min(int(counts[r]), idx.shape[1]))):
            p = int(idx[r, col])
            if p < 0 or not 0 <= req < table.shape[0] or p // page_size >= table.shape[1]:
                continue
            phys = int(table[req, p // page_size])
            if 0 <= phys < pages:
                toks.append((phys, p % page_size))
        if not toks:
            continue
        kk = torch.stack([k[a, b] for a, b in toks]).float().repeat_interleave(Hq // Hkv, dim=1)  # [n, Hq, D]
        vv = torch.stack([v[a, b] for a, b in toks]).float().repeat_interleave(Hq // Hkv, dim=1)
        s = torch.einsum("hd,nhd->hn", q[r].float(), kk) * (D**-0.5 if scale is None else scale)
        result[r] = torch.einsum("hn,nhd->hd", torch.softmax(s, -1), vv).to(q.dtype)
    return native.apply_gate(result, a.output_gate, a.gate_rounding)


# ------------------------------------------------------------------ the spec
@pytest.mark.parametrize("kw", [{}, {"counts": True, "gate": "eager"}, {"padding": 3, "gate": None}],
                         ids=["fused", "counts-eager", "padding-nogate"])  # fmt: skip
def test_native_is_the_per_row_loop(kw):
    args = case_args(dtype=torch.bfloat16, **kw)
    got, expected = run(args, provider="native"), _loop_reference(args)
    # fp32 sums in another order, then one rounding: at most one bf16 ulp apart, mostly equal
    assert torch.allclose(got.float(), expected.float(), rtol=2**-7, atol=1e-6)
    assert (got == expected).float().mean() > 0.95


def test_the_compiled_spec_gathers_in_fewer_chunks_and_covers_every_row(monkeypatch):
    """Under torch.compile the spec gathers ``_GATHER_ELEMENTS_COMPILED / _GATHER_ELEMENTS`` times more rows a
    chunk (Dynamo unrolls the chunk loop, and the compile time grows with the chunks): the traced graph has that
    many fewer chunks, and they still cover every row: the per-row loop's output within fp32 rounding (the
    products are batched by other chunks; a row left out would read zeros)."""
    args = case_args(rows=23, dtype=torch.float32, counts=True)
    a = named(args)
    per_row = a.logical_indices.shape[1] * a.k_cache.shape[2] * a.q.shape[2]  # gathered K elements a row
    monkeypatch.setattr(native, "_GATHER_ELEMENTS", 2 * per_row)  # 2 rows a chunk eagerly: 12 chunks
    monkeypatch.setattr(native, "_GATHER_ELEMENTS_COMPILED", 8 * per_row)  # 8 compiled: 3 chunks
    graphs = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    out = torch.full_like(a.q, float("nan"))
    torch.compile(native.sparse_paged_attention, backend=backend, fullgraph=True)(out, *args[1:])
    einsums = sum(getattr(n.target, "__name__", "") == "einsum" for g in graphs for n in g.graph.nodes)
    chunks = einsums // 2  # two a chunk
    assert chunks == 3
    torch.testing.assert_close(out, _loop_reference(args))


def test_physical_slots_rules():
    idx = torch.tensor([[0, 5, 9, -1, 12, 3]], dtype=torch.int32)  # page size 4
    table = torch.tensor([[2, 7, 9]], dtype=torch.int32)  # 3 logical pages; 9 >= num_pages = 8
    page, slot, valid = native.physical_slots(idx, table, torch.tensor([0], dtype=torch.int32), None, 4, 8)
    assert valid.tolist() == [[True, True, False, False, False, True]]  # 9 -> page 9 out; 12 -> past table
    assert page[valid].tolist() == [2, 7, 2] and slot[valid].tolist() == [0, 1, 3]
    for req in (-1, 1):  # padding rows: a request out of range has no token
        _, _, valid = native.physical_slots(idx, table, torch.tensor([req], dtype=torch.int32), None, 4, 8)
        assert not valid.any()
    _, _, valid = native.physical_slots(idx, table, torch.tensor([0], dtype=torch.int32),
                                        torch.tensor([2], dtype=torch.int32), 4, 8)  # fmt: skip
    assert valid.tolist() == [[True, True, False, False, False, False]]


def test_rows_without_a_token_are_zero_and_padding_rows_too():
    args = case_args(dtype=torch.bfloat16, padding=4, counts=True)
    counts = args[7].clone()
    counts[3] = 0
    out = run(with_args(args, counts=counts), provider="native")
    assert (out[3] == 0).all() and (out[-4:] == 0).all()


def test_the_two_gate_roundings_differ_on_random_gates():
    """So the bitwise gate-stage tests can tell them apart (a 2e-2 tolerance could not)."""
    gen = make_generator(0)
    attn = torch.randn(64, 24, 256, generator=gen).to(torch.bfloat16)
    gate = (torch.randn(64, 24, 256, generator=gen) * 2).to(torch.bfloat16)
    fused, eager = native.apply_gate(attn, gate, "fused"), native.apply_gate(attn, gate, "eager")
    differ = (fused != eager).float().mean()
    assert 0.05 < differ < 0.5, differ
    assert torch.allclose(fused.float(), eager.float(), rtol=2e-2, atol=2e-2)  # upstream's check passes both


def test_fp8_scales_are_not_interchangeable():
    args = case_args(dtype=torch.bfloat16, kv_dtype=torch.float8_e4m3fn)
    right = run(args, provider="native")
    swapped = run(with_args(args, k_scale=args[12], v_scale=args[11]), provider="native")
    assert not CONTRACT.check(swapped, right, args=args).passed


def test_rows_zero_leaves_out_untouched():
    args = case_args(rows=0, reqs=1)
    out = torch.full_like(args[0], 7.0)
    op.run_provider("native", out, *args[1:])
    assert out.shape[0] == 0


# ------------------------------------------------------------------ errors
def _bad(name):
    args = case_args()
    q, k = args[1], args[2]
    return {
        "q": with_args(args, q=q.float()),
        "k_cache": with_args(args, k_cache=k.to(torch.bfloat16), v_cache=args[3].to(torch.bfloat16)),
        "v_cache": with_args(args, v_cache=args[3][:, :, :, :16]),
        "logical_indices": with_args(args, logical_indices=args[4].long()),
        "block_table": with_args(args, block_table=args[5].long()),
        "token_to_req": with_args(args, token_to_req=args[6][:-1]),
        "counts": with_args(args, counts=torch.zeros(3, dtype=torch.int32)),
        "Hkv": with_args(case_args(Hq=4, Hkv=2), q=torch.zeros(9, 5, 32, dtype=torch.float16), out=torch.zeros(9, 5, 32,
                     dtype=torch.float16), output_gate=torch.zeros(9, 5, 32, dtype=torch.float16)),
        "power of two": with_args(args, q=q[..., :24], out=args[0][..., :24], output_gate=args[9][..., :24],
                              k_cache=k[..., :24], v_cache=args[3][..., :24]),
        "output_gate": with_args(args, output_gate=args[9].float()),
        "gate_rounding": with_args(args, gate_rounding="fast"),
        "k_scale": with_args(args, k_scale=0.5),
        "out": with_args(args, out=args[0][:, :, :16]),
        "one device": with_args(args, output_gate=args[9].to("meta")),
    }[name]  # fmt: skip


BAD = ["q", "k_cache", "v_cache", "logical_indices", "block_table", "token_to_req", "counts", "Hkv", "power of two",
       "output_gate", "gate_rounding", "k_scale", "out", "one device"]  # fmt: skip


@pytest.mark.parametrize("name", BAD)
def test_bad_input_is_an_error_naming_the_argument(name):
    with pytest.raises((ValueError, TypeError), match=name):
        op(*_bad(name))


def test_fp8_without_scales_is_an_error():
    args = case_args(dtype=torch.bfloat16, kv_dtype=torch.float8_e5m2)
    with pytest.raises(ValueError, match="v_scale is required"):
        op(*with_args(args, v_scale=None))


def test_public_call_allocates_and_returns_out():
    args = case_args(dtype=torch.bfloat16)
    a = named(args)
    call = (a.q, a.k_cache, a.v_cache, a.logical_indices, a.block_table, a.token_to_req)
    got = exactfuse.sparse_paged_attention(*call, output_gate=a.output_gate)
    assert torch.equal(got, run(args, provider="native"))
    mine = torch.empty_like(a.q)
    assert exactfuse.sparse_paged_attention(*call, output_gate=a.output_gate, out=mine) is mine


# ------------------------------------------------------------------ heuristics
def test_attention_config_splits_until_the_gpu_is_full():
    sms = 132
    assert heuristics.attention_config(4, 2, 256, 2051, sms).num_splits == 32  # 65 tiles of 32: two a split
    # one row: 2 x 32 programs would leave SMs idle, so 64-token tiles at 8 warps, 33 tiles: 16 splits
    few = {"num_warps": 8, "prefetch_slots": True}  # and the next tile's slots loaded ahead,
    # every split merged at once, 64 columns and 4 warps a merge program, a programmatic dependent launch
    few |= {"merge_group": 16, "merge_block_d": 64, "merge_warps": 4, "pdl": True}
    assert heuristics.attention_config(1, 2, 256, 2051, sms) == AttentionConfig(64, 16, **few)
    assert heuristics.attention_config(1, 4, 128, 2048, sms) == AttentionConfig(64, 16, **few)
    assert heuristics.attention_config(16, 2, 128, 2048, sms) == AttentionConfig(64, 16)
    assert heuristics.attention_config(64, 2, 256, 2051, sms).num_splits == 4  # 528 // 128 programs
    assert heuristics.attention_config(4096, 2, 256, 2051, sms).num_splits == 1
    assert heuristics.attention_config(64, 2, 256, 2051, sms).block_n == 32
    # an fp8 cache row of 256 B: 64 tokens over several waves, 32 where one wave of split rows runs; the
    # slots of a K tile of 8 KiB loaded ahead, of 16 KiB not
    assert heuristics.attention_config(1024, 2, 256, 2051, sms, kv_bytes=1) == AttentionConfig(64, 1)
    assert heuristics.attention_config(64, 2, 256, 2051, sms, kv_bytes=1) == AttentionConfig(32, 4, prefetch_slots=True)
    assert heuristics.attention_config(64, 4, 256, 2048, sms, kv_bytes=1) == AttentionConfig(32, 2, prefetch_slots=True)
    assert heuristics.attention_config(64, 2, 128, 2048, sms, kv_bytes=1) == AttentionConfig(64, 4, prefetch_slots=True)
    assert heuristics.attention_config(1, 2, 256, 2048, sms, kv_bytes=1) == AttentionConfig(64, 16, **few)
    assert not heuristics.attention_config(64, 2, 128, 2048, sms).prefetch_slots  # bf16, 16 KiB
    assert heuristics.attention_config(1, 2, 128, 40, sms).num_splits == 1  # one tile: nothing to split
    for rows in (1, 16, 64, 256, 1024):
        c = heuristics.attention_config(rows, 2, 256, 2051, sms)
        assert c.num_splits <= -(-2051 // c.block_n)
    with pytest.raises(ValueError, match="num_splits"):
        AttentionConfig(32, 0)
    with pytest.raises(ValueError, match="block_n"):
        AttentionConfig(24, 1)


def test_reachable_configs_cover_every_row_count():
    configs = set(heuristics.reachable_configs(2, 256, 2051, 132, max_rows=20000))
    for rows in (1, 2, 3, 100, 263, 264, 265, 4095, 5000, 20000):
        assert heuristics.attention_config(rows, 2, 256, 2051, 132) in configs


# ------------------------------------------------------------------ interpreter
@pytest.mark.interpreter
def test_interpreter_contract_matrix():
    assert_contract_matrix(op, "cpu", torch.float16)


@pytest.mark.interpreter
def test_interpreter_every_split_configuration_meets_the_contract_and_repeats():
    args = case_args(rows=5, Hq=8, Hkv=2, D=16, page=7, W=100, counts=True)
    for config in forced_configs(2, 16, 100, CPU):
        out = run(args, config)
        assert_contract(args, out, str(config))
        assert torch.equal(out, run(args, config)), f"{config}: not deterministic"


@pytest.mark.interpreter
def test_interpreter_the_merge_in_the_launch_is_the_merge_kernel_bit_for_bit():
    """The last split to arrive merges with the merge kernel's arithmetic (one helper), gate included,
    and leaves the arrival counters zero."""
    from exactfuse.ops.arrival import arrival_counters

    for gate in ("fused", "eager", None):
        args = with_args(case_args(rows=7, Hq=8, Hkv=2, D=16, page=5, W=90, counts=True, seed=3),
                         **({"output_gate": None} if gate is None else {"gate_rounding": gate}))  # fmt: skip
        for splits in (2, 3):
            two = run(args, AttentionConfig(16, splits))
            one = run(args, AttentionConfig(16, splits, fixup=True))
            assert torch.equal(one.view(torch.int16), two.view(torch.int16)), (gate, splits)
    assert not arrival_counters(CPU, 7 * 2).any()


@pytest.mark.interpreter
@pytest.mark.parametrize("rounding", ["fused", "eager"])
@pytest.mark.parametrize("splits", [1, 3])
def test_interpreter_gate_stage_is_the_formula_bit_for_bit(rounding, splits):
    args = with_args(case_args(rows=6, Hq=4, Hkv=1, D=32, W=50), gate_rounding=rounding)
    config = AttentionConfig(16, splits, fixup=splits > 1)
    plain = run(with_args(args, output_gate=None), config)
    gated = run(args, config)
    assert torch.equal(gated, native.apply_gate(plain, args[9], rounding))


@pytest.mark.interpreter
@pytest.mark.parametrize(
    "config",
    [AttentionConfig(16, 1), AttentionConfig(16, 3), AttentionConfig(16, 3, fixup=True)],
    ids=["single", "split", "split-fixup"],
)
def test_interpreter_nan_and_inf_positions_are_native_s(config):
    for what, args in specials_cases():
        expected = run(args, provider="native")
        got = run(args, config)
        assert torch.equal(torch.isnan(got), torch.isnan(expected)), what
        assert torch.equal(torch.isinf(got), torch.isinf(expected)), what
        finite = torch.isfinite(expected)
        assert CONTRACT.check(got, expected, args=args).passed, what
        if what == "nan-unread":
            assert finite.all(), "a slot no valid entry names leaked into the spec"
        if what == "neg-inf-row":
            assert torch.isnan(expected[0, 0]).all() and finite[0, 1:].all()


@pytest.mark.interpreter
def test_interpreter_declines_bf16_and_fp8_and_wide_groups_to_native():
    for args in (case_args(dtype=torch.bfloat16), case_args(dtype=torch.bfloat16, kv_dtype=torch.float8_e5m2),
                 case_args(Hq=32, Hkv=1)):  # fmt: skip
        assert op.select(*args).name == "native"
        assert op.providers["triton"].accepts(*args) is not True
    with op.priority(["triton", "native"]):
        assert op.select(*case_args()).name == "triton"


@pytest.mark.interpreter
def test_interpreter_warmup_launches_every_reachable_configuration():
    layer = {"num_heads": 4, "num_kv_heads": 1, "head_dim": 16, "width": 40}
    warmed = attn_warmup.warmup_layer(CPU, torch.float16, **layer)
    assert set(warmed) == set(heuristics.reachable_configs(1, 16, 40, num_sms(CPU)))


@pytest.mark.interpreter
def test_interpreter_opcheck():
    args = with_args(case_args(rows=3, Hq=4, Hkv=1, D=16, W=20), out=torch.empty(3, 4, 16, dtype=torch.float16))
    with op.priority(["triton"]):
        torch.library.opcheck(op.torch_op, args)


def test_declared_with_cost_grids_and_warmup():
    assert "sparse_paged_attention" in exactfuse.OPS and op.compiler == "opaque"
    assert {"default", "quick"} <= set(op.grids) and op.warmup_fn is not None
    args = case_args()
    assert op.bytes_fn(*args) > args[1].numel() * 2


# ------------------------------------------------------------------ GPU
GPU_DTYPES = pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])


@pytest.mark.gpu
@GPU_DTYPES
def test_gpu_contract_matrix(dtype):
    """Serving-shaped cases (D 256, W 2051, pages 784-1600, fp8 with k_scale 0.5 / v_scale 2), D 64/128, edges."""
    assert op.select(*case_args(device=CUDA, dtype=dtype)).name == "triton"
    assert_contract_matrix(op, "cuda", dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("kv", ["bf16", "e4m3"])
def test_gpu_every_split_configuration_meets_the_contract_and_repeats(kv):
    kv_dtype = torch.bfloat16 if kv == "bf16" else torch.float8_e4m3fn
    for Hkv, D, rows in ((2, 256, 64), (4, 128, 16)):
        args = case_args(rows=rows, Hq=12 * Hkv, Hkv=Hkv, D=D, page=1600, W=2051, dtype=torch.bfloat16, device=CUDA,
                     kv_dtype=kv_dtype, counts=True)  # fmt: skip
        single = run(args, AttentionConfig(32, 1))
        outs = {}
        for config in forced_configs(Hkv, D, 2051, CUDA):
            out = outs[config] = run(args, config)
            assert_contract(args, out, f"Hkv {Hkv} D {D} {config}")
            assert CONTRACT.check(out, single, args=args).passed, f"{config} against one split"
            assert torch.equal(out, run(args, config)), f"{config}: not deterministic"
        for config, out in outs.items():  # the merge in the launch is the second launch's, bit for bit
            if config.fixup:
                twin = dataclasses.replace(config, fixup=False)
                assert torch.equal(out.view(torch.int16), outs[twin].view(torch.int16)), config


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("rounding", ["fused", "eager"])
def test_gpu_gate_stage_bitwise_on_every_gate_value(rounding, dtype):
    """All 65,536 16-bit gate values through the kernel's gate (the sigmoid formula fastmath proved for the
    dtype), against the spec's gate stage on the kernel's own ungated output: bit for bit, NaN payloads
    aside."""
    args = case_args(rows=64, Hq=4, Hkv=1, D=256, page=64, W=300, dtype=dtype, device=CUDA)
    gate = fastmath.all_inputs(dtype, CUDA).view(64, 4, 256)
    args = with_args(args, output_gate=gate, gate_rounding=rounding)
    plain = run(with_args(args, output_gate=None))
    differ = fastmath.differing(run(args), native.apply_gate(plain, gate, rounding))
    assert not differ.any(), f"{int(differ.sum())} of 65536 gate values differ, e.g. {gate[differ][:4].tolist()}"
    if rounding == "eager":
        assert fastmath.chosen_formula("sigmoid", dtype, gate.device) == fastmath.CANDIDATES["sigmoid", dtype][0]


@pytest.mark.gpu
@pytest.mark.parametrize("rounding", ["fused", "eager"])
def test_gpu_gate_stage_is_the_formula_bit_for_bit(rounding):
    args = with_args(case_args(rows=64, Hq=24, Hkv=2, D=256, page=1600, W=2051, dtype=torch.bfloat16, device=CUDA),
                 gate_rounding=rounding)  # fmt: skip
    for config in (AttentionConfig(32, 1), AttentionConfig(32, 8)):
        plain = run(with_args(args, output_gate=None), config)
        gated = run(args, config)
        assert torch.equal(gated, native.apply_gate(plain, args[9], rounding)), config
        other = "eager" if rounding == "fused" else "fused"
        assert not torch.equal(gated, native.apply_gate(plain, args[9], other)), config


@pytest.mark.gpu
@pytest.mark.big_memory
def test_gpu_int64_cache_offsets():
    """A cache of more than 2**31 elements: the pages past the 2**31st element read right."""
    D, Hkv, page = 256, 8, 1024
    pages = 2**31 // (page * Hkv * D) + 4
    gen = make_generator(3)
    k = torch.randn((pages, page, Hkv, D), dtype=torch.bfloat16, device=CUDA)
    v = torch.randn((pages, page, Hkv, D), dtype=torch.bfloat16, device=CUDA)
    rows, W = 4, 512
    table = torch.arange(pages - 3, pages, dtype=torch.int32, device=CUDA)[None]  # the last pages only
    idx = torch.randint(0, 3 * page, (rows, W), generator=gen).to(torch.int32).to(CUDA)
    q = torch.randn((rows, 16 * Hkv, D), dtype=torch.bfloat16, device=CUDA)
    args = (torch.empty_like(q), q, k, v, idx, table, torch.zeros(rows, dtype=torch.int32, device=CUDA),
            None, None, None, "fused", None, None)  # fmt: skip
    assert_contract(args, run(args), "int64 offsets")

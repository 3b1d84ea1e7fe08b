"""The conv family's launch variants against the plain launch, under the interpreter: register-window runs
(``ConvConfig.unroll``), the lean prefill kernel with the prefill kernel's fixup launch (``ConvConfig.lean``),
the decode paths (register window, flat run, channels-first grid) and channel blocks without masks; on the
GPU, the decode paths the rule does not take yet, in the 16-bit dtypes."""

import dataclasses

import pytest
import torch
import triton
import triton.language as tl

from exactfuse.ops.conv import causal_conv1d, causal_conv1d_fn, causal_conv1d_update, heuristics, short_conv
from exactfuse.ops.conv import launch as conv_launch
from exactfuse.ops.conv.slots import find_request, find_request_near, fixup_tile, lean_tile
from exactfuse.testing import clone_args, make_generator
from exactfuse.testing.cases.conv import causal_case, fn_case, last_k_update_case, short_conv_case, update_case
from support.conv import one_layout

INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT_VIEW[t.dtype])


def run(provider: str, case, op):
    args, kwargs = clone_args(case.args, case.kwargs)
    out = op.run_provider(provider, *args, **kwargs)
    return (*args, out)


@pytest.mark.interpreter
@pytest.mark.parametrize("unroll", [4])
def test_interpreter_register_window_gives_the_same_bits(unroll, monkeypatch):
    """Spec and prefill rows in runs over a register window (``ConvConfig.unroll``) against each tap's
    own loads: outputs, residuals and states bit for bit, for short_conv and causal_conv1d (its packed
    ``seq_idx`` cases included), without the two 676-row strided-index cases (their index stride is the
    slot lookup's, which the window does not change; the GPU tests run them)."""
    reference = {"lean": False, "unroll": 1}
    assert_same_bits(monkeypatch, {"unroll": unroll, "lean": False}, reference, skip=("decode", "strided"))


@pytest.mark.interpreter
@pytest.mark.parametrize(("rows", "unroll"), [(4, 1), (8, 2), (8, 8)])
def test_interpreter_lean_prefill_gives_the_same_bits(rows, unroll, monkeypatch):
    """Tiles of 4 or 8 rows: the lean kernel on the tiles with no request boundary near them, the fixup launch
    on the rest, against the per-row masked tile everywhere: outputs, residuals and states bit for bit
    (varlen and empty requests, padded slots, initial states, rows past the last request, no request at
    all: causal_conv1d_fn's R0 case). The taps reach ``SL`` = 1 to 6 rows back, so one boundary leaves one
    to three tiles and the first tiles number up to 2. The lean tile's rows as one run each (``unroll`` 1:
    ``K`` shifted loads), as four runs of 2 over a register window, or as one run of 8. Prefill cases only (no
    other mode takes the lean kernel), without the two 676-row strided-index ones (half the time; the GPU
    tests run them)."""
    ops = (short_conv, causal_conv1d, causal_conv1d_fn)
    variant = {"BT": rows, "unroll": unroll}
    reference = {"BT": rows, "unroll": 1, "lean": False}
    assert_same_bits(monkeypatch, variant, reference, ops, skip=("decode", "spec", "strided"))


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16], ids=["fp32", "fp16"])
def test_interpreter_stateless_request_starts_give_the_same_bits(dtype, monkeypatch):
    """Without a state the lean kernel also takes the tiles that start a request (``slots.lean_tile``'s STARTS),
    zeroing the taps before the request's first row: requests on tile edges (8-row tiles, ``SL`` = 3 and 6),
    one shorter than a tile, empty ones, and one that ends mid-tile, against the per-row masked tile, bit for
    bit; and the lean kernel takes each such tile (``_lean_on_host``)."""
    lengths = (8, 16, 0, 8, 5, 24, 0, 11)
    qsl = [0, *torch.tensor(lengths).cumsum(0).tolist()]
    lean = [{t for t in range(0, qsl[-1], 8) if _lean_on_host(t, qsl, len(lengths), qsl[-1], 3, 8, s)} for s in (0, 1)]
    assert lean[1] - lean[0] == {8, 24}  # the requests on a tile edge past the first tile, a tile long or more
    cases = [
        fn_case(f"aligned-K{K}-D{D}", lengths, K=K, D=D, C=24, dtype=dtype, device="cpu", gen=make_generator(K + D))
        for K, D in ((4, 1), (3, 3))
    ]
    variant, reference = {"BT": 8, "unroll": 1}, {"BT": 8, "unroll": 1, "lean": False}
    extra = {causal_conv1d_fn: cases}
    assert_same_bits(monkeypatch, variant, reference, (causal_conv1d_fn,), ("",), extra, dtype=dtype)


@pytest.mark.interpreter
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_interpreter_lean_weight_words_give_the_same_bits(dtype, monkeypatch):
    """16-bit weights: the lean kernel reads each channel's taps as one word where they make one (K = 4: 64
    bits, K = 2: 32; ``lean.tile_weights``) and as a ``[BC, KW]`` tile otherwise (K = 3), in runs of 4 rows
    over a register window, against the per-row masked tile: causal_conv1d prefill outputs and states bit for
    bit (varlen requests, so lean and fixup tiles both)."""
    words = {}
    for K in (2, 3, 4):
        case = causal_case(f"prefill-K{K}", (40, 7), K=K, D=1, C=48, dtype=dtype, device="cpu", gen=make_generator(K))
        words[K] = conv_launch._weight_word(case.args[1])
        variant, reference = {"BT": 8, "unroll": 4}, {"BT": 8, "unroll": 1, "lean": False}
        assert_same_bits(monkeypatch, variant, reference, (causal_conv1d,), ("",), {causal_conv1d: [case]}, dtype=dtype)
    assert words == {2: 2, 3: 0, 4: 4}


def test_weight_word_needs_dense_aligned_16_bit_taps():
    """The launcher's word check (``triton._weight_word``): a contiguous ``[C, 4]`` or ``[C, 2]`` 16-bit weight
    makes words; fp32, 3 taps, a transposed view and a view starting mid-word do not."""
    w = torch.zeros(8, 4, dtype=torch.bfloat16)
    assert conv_launch._weight_word(w) == 4
    assert conv_launch._weight_word(torch.zeros(8, 2, dtype=torch.float16)) == 2
    assert conv_launch._weight_word(w.float()) == 0
    assert conv_launch._weight_word(torch.zeros(8, 3, dtype=torch.bfloat16)) == 0
    assert conv_launch._weight_word(torch.zeros(4, 8, dtype=torch.bfloat16).t()) == 0
    assert conv_launch._weight_word(torch.zeros(9 * 4, dtype=torch.bfloat16)[2:34].view(8, 4)) == 0


def test_scalar_window_only_for_short_windows_without_a_vector_width():
    """The launcher's SCALAR_WINDOW check: the slot cache's ``[slots, C, K - 1]`` window (3 positions, stride 3)
    takes it; short_conv's ``[slot, C, W]`` window of 9 (stride 9, 2.98x slower scalar on the H200), FLA's
    ``[B, C, K]`` state (stride 4: a vector width) and ``[slot, W, C]`` storage do not."""
    align = conv_launch._stride_alignment
    assert conv_launch._scalar_window(False, align(3), 3)
    assert conv_launch._scalar_window(False, align(1), 1)
    assert not conv_launch._scalar_window(False, align(9), 9)
    assert not conv_launch._scalar_window(False, align(5), 5)
    assert not conv_launch._scalar_window(False, align(4), 4)
    assert not conv_launch._scalar_window(True, align(1), 3)


@pytest.mark.interpreter
def test_interpreter_decode_window_tile_gives_the_same_bits(monkeypatch):
    """Decode with the slot's window held in registers (``ConvConfig.window_tile``: loaded once, the taps from
    its columns, shifted in registers) against the taps' and the window's own loads: outputs, residuals and
    states bit for bit, short_conv's and causal_conv1d_update's decode cases, the token-mapped ones included
    (each in one state layout, both layouts used; in ``[slot, W, C]`` storage too, where the tile is not the
    shipped choice), and FLA's ``[B, C, K]`` state with the history at its end (the window's head shifted too)."""
    fla = [last_k_update_case(f"lastK-B{B}", B, C=48, K=4, dtype=torch.float32, device="cpu", gen=make_generator(B))
           for B in (1, 3)]  # fmt: skip
    assert_same_bits(
        monkeypatch, {"window_tile": True}, {"window_tile": False}, (short_conv, causal_conv1d_update),
        skip=("spec", "prefill", "chunk"), extra={causal_conv1d_update: fla},
    )  # fmt: skip


@pytest.mark.interpreter
def test_interpreter_decode_channels_first_grid_gives_the_same_bits(monkeypatch):
    """Decode on the one-axis grid whose consecutive programs take one row's channel blocks
    (``ConvConfig.channels_first``), with and without the register window, against the two-axis grid:
    outputs, residuals and states bit for bit on short_conv's and causal_conv1d_update's decode cases
    (a channel count no block divides, R = 0 included) and FLA's ``[B, C, K]`` state."""
    fla = [last_k_update_case(f"lastK-B{B}", B, C=48, K=4, dtype=torch.float32, device="cpu", gen=make_generator(B))
           for B in (1, 3)]  # fmt: skip
    for tile in (False, True):
        assert_same_bits(
            monkeypatch, {"channels_first": True, "window_tile": tile}, {"window_tile": tile},
            (short_conv, causal_conv1d_update), skip=("spec", "prefill", "chunk"), extra={causal_conv1d_update: fla},
        )  # fmt: skip


@pytest.mark.interpreter
def test_interpreter_decode_rows_per_program_give_the_same_bits(monkeypatch):
    """Decode with several rows a program (``ConvConfig.BT`` in decode: each row its own request and window, one
    after another, the weights and bias read once): 3 rows a program (so the last program's rows run past the
    batch) with and without the register window, and 2 on the channels-first grid, against one row a
    program: outputs, residuals and states bit for bit on short_conv's and causal_conv1d_update's decode cases
    (R = 0 included) and FLA's ``[B, C, K]`` state."""
    fla = [last_k_update_case(f"lastK-B{B}", B, C=48, K=4, dtype=torch.float32, device="cpu", gen=make_generator(B))
           for B in (1, 4)]  # fmt: skip
    for change in ({"BT": 3, "window_tile": True}, {"BT": 3, "window_tile": False},
                   {"BT": 2, "window_tile": True, "channels_first": True}):  # fmt: skip
        reference = {k: v for k, v in change.items() if k != "BT"}
        assert_same_bits(
            monkeypatch, change, reference, (short_conv, causal_conv1d_update), skip=("spec", "prefill", "chunk"),
            extra={causal_conv1d_update: fla},
        )  # fmt: skip


@pytest.mark.interpreter
def test_interpreter_decode_flat_window_gives_the_same_bits(monkeypatch):
    """Decode with each program's dense ``[BC, W]`` block of windows read and written as one flat run and
    the taps and the shifted window gathered from it (``ConvConfig.flat_window``; the launcher takes it
    where the slots are dense and ``BC`` divides ``C``, else the two-load path) against the two-load path:
    outputs, residuals and states bit for bit on the decode cases in ``[slot, C, W]`` storage, and FLA's
    ``[B, C, K]`` state (8 channels a program, which divides every case's C but the odd ones)."""
    fla = [last_k_update_case(f"lastK-B{B}", B, C=48, K=4, dtype=torch.float32, device="cpu", gen=make_generator(B))
           for B in (1, 3)]  # fmt: skip
    assert_same_bits(
        monkeypatch, {"flat_window": True, "BC": 8}, {"BC": 8}, (short_conv, causal_conv1d_update),
        skip=("spec", "prefill", "chunk", "-wc-"), extra={causal_conv1d_update: fla}, every_layout=True,
    )  # fmt: skip


@pytest.mark.interpreter
def test_interpreter_decode_flat_window_moves_16_bit_rows_bit_for_bit(monkeypatch):
    """The flat run over 16-bit slots: rows of 8 elements (16 bytes) at 9 positions (short_conv ``cw``, K = 4,
    D = 3: a row meets at most 1 window end, and 9 rows at 8 channels a program pad to 16), rows of 4 at 4
    (K = 3, D = 2, and FLA's ``[B, C, K]`` state: 1 end a row) and at 3 (the ``[slots, C, K - 1]`` slot cache: up
    to 2 ends a row, 6 rows padded to 8). fp16 cases, ``C`` = 48 at 8 and 16 channels a program, against the
    two-load path: outputs, residuals and states bit for bit."""
    kw = {"C": 48, "dtype": torch.float16, "device": "cpu"}
    short = [short_conv_case(f"decode-cw-K{K}-D{D}", "decode", decodes=3, K=K, D=D, layout="cw", gen=make_generator(K),
                             **kw) for K, D in ((4, 3), (3, 2))]  # fmt: skip
    update = [update_case("decode", 3, None, K=4, D=1, gen=make_generator(6), **kw),
              last_k_update_case("lastK", 3, K=4, gen=make_generator(7), **kw)]  # fmt: skip
    for bc in (8, 16):
        assert_same_bits(
            monkeypatch, {"flat_window": True, "BC": bc}, {"BC": bc}, (short_conv, causal_conv1d_update), ("",),
            {short_conv: short, causal_conv1d_update: update},
        )  # fmt: skip


@pytest.mark.interpreter
def test_interpreter_unmasked_channel_blocks_give_the_same_bits(monkeypatch):
    """Channel blocks that divide ``C`` launch without channel masks (``EVEN_C``): ``C`` = 48 at 16 channels a
    program (no masks) against 32 (a masked half block), in every mode: short_conv decode in both state
    layouts, spec and prefill (40- and 7-row requests: lean tiles and fixup tiles), causal_conv1d prefill,
    causal_conv1d_update
    on the slot cache and on FLA's state; outputs, residuals and states bit for bit."""
    kw = {"C": 48, "dtype": torch.float32, "device": "cpu"}
    short = [short_conv_case(f"decode-{layout}", "decode", decodes=3, K=3, D=2, layout=layout, gen=make_generator(i),
                             **kw) for i, layout in enumerate(("cw", "wc"))]  # fmt: skip
    short.append(short_conv_case("spec", "spec", (2, 2), sql=2, accepted=(1, 2), K=3, D=2, gen=make_generator(2), **kw))
    short.append(short_conv_case("prefill", "prefill", (40, 7), K=3, D=2, layout="wc", gen=make_generator(3), **kw))
    causal = [causal_case("prefill", (40, 7), K=4, D=1, gen=make_generator(5), **kw)]
    update = [update_case("decode", 3, None, K=4, D=1, gen=make_generator(6), **kw),
              last_k_update_case("lastK", 3, K=4, gen=make_generator(7), **kw)]  # fmt: skip
    extra = {short_conv: short, causal_conv1d: causal, causal_conv1d_update: update}
    assert_same_bits(monkeypatch, {"BC": 16, "BC_STATE": 16}, {"BC": 32, "BC_STATE": 32}, tuple(extra), ("",), extra)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize(
    "change", [{"flat_window": True}, {"BT": 4}, {"BT": 4, "flat_window": True}], ids=["flat", "rows4", "rows4-flat"]
)
def test_gpu_decode_paths_give_the_shipped_bits(dtype, change, monkeypatch):
    """The decode paths of the rule and of a sweep, at the declared sizes (C up to 10240): the flat run (where the
    slots are dense ``[C, W]`` blocks: short_conv's ``cw``, the slot cache, FLA's state) and 4 rows a program,
    against the rule with the register window in place of the flat run: outputs, residuals and states bit for
    bit, in both 16-bit dtypes (the interpreter runs fp32 and fp16 only), with FLA's ``[B, C, K]`` state at
    B = 1 and 64."""
    fla = [last_k_update_case(f"lastK-B{B}", B, C=10240, K=4, dtype=dtype, device="cuda", gen=make_generator(B))
           for B in (1, 64)]  # fmt: skip
    assert_same_bits(
        monkeypatch, change, {"flat_window": False, "window_tile": True}, (short_conv, causal_conv1d_update),
        skip=("spec", "prefill", "chunk"), extra={causal_conv1d_update: fla}, every_layout=True, dtype=dtype,
        device="cuda",
    )  # fmt: skip


def assert_same_bits(
    monkeypatch, variant: dict, reference: dict, ops=(short_conv, causal_conv1d), skip=("decode",),
    extra: dict | None = None, every_layout: bool = False, dtype: torch.dtype = torch.float32, device: str = "cpu",
) -> None:  # fmt: skip
    """Every case of ``ops`` (``dtype``, on ``device``) whose id names none of the strings in ``skip`` (``""``
    names every one), in one state layout (``every_layout``: in each layout ``skip`` leaves), and the cases of
    ``extra[op]``, launched with the
    shipped rule changed by ``variant`` and by ``reference``: every floating-point argument and output bit
    for bit."""
    shipped = heuristics.conv_config
    failures = []
    for op in ops:
        cases = [case for case in op.iter_cases(device, dtype) if not any(mode in case.id for mode in skip)]
        # a case declared in both state layouts in one of them, by turns within its mode (each layout in every mode)
        chosen = cases if every_layout else list(one_layout(cases))
        for case in [*chosen, *(extra or {}).get(op, ())]:
            runs = []
            for change in (variant, reference):
                with monkeypatch.context() as m:
                    m.setattr(heuristics, "conv_config", lambda *a, c=change: dataclasses.replace(shipped(*a), **c))
                    runs.append(run("triton", case, op))
            for i, (a, b) in enumerate(zip(*runs, strict=True)):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and not torch.equal(bits(a), bits(b)):
                    failures.append(f"{op.name} {case.id}: argument {i} differs")
    assert not failures, "\n".join(failures)


@triton.jit
def _tile_owners_kernel(
    p_qsl, p_count, L, R, SL: tl.constexpr, BT: tl.constexpr, FIXUP: tl.constexpr, STARTS: tl.constexpr
):
    """Adds 1 to ``p_count[tile]`` for each tile this program takes: the lean kernel's grid (program ``p`` is
    tile ``p``) or the fixup launch's (``slots.fixup_tile``); STARTS: the lean kernel also takes request starts."""
    p = tl.program_id(0)
    if FIXUP:
        t0, own, _ = fixup_tile(p, L, R, p_qsl, SL, BT, STARTS)
    else:
        t0 = p * BT
        own = lean_tile(t0, L, R, p_qsl, SL, BT, STARTS)[0]
    if own:
        tl.atomic_add(p_count + t0 // BT, 1)


@pytest.mark.interpreter
@pytest.mark.parametrize("starts", [False, True], ids=["with-state", "stateless"])
@pytest.mark.parametrize(("BT", "SL"), [(4, 1), (4, 6), (8, 3), (16, 3)])
def test_interpreter_lean_and_fixup_take_every_tile_once(BT, SL, starts):
    """The lean kernel and the fixup launch split the prefill tiles between them: each tile taken by exactly
    one program of the two grids (a tile taken twice is work done twice, one taken by none an output never
    written). Requests of 1-40 rows, empty ones, boundaries on and off the tile edges, rows past the last
    request, lengths that are and are not a multiple of ``BT``, one request and none."""
    gen = torch.Generator().manual_seed(BT * 7 + SL)
    layouts = [[], [0], [5], [BT * 4], [BT, BT, BT], [0, 3, 0, 0, 9], [1] * 9]
    layouts += [torch.randint(0, 41, (n,), generator=gen).tolist() for n in (3, 8, 17)]
    for lengths in layouts:
        for tail in (0, 1, BT):
            qsl = torch.tensor([0, *lengths], dtype=torch.int64).cumsum(0).to(torch.int32)
            R, L = len(lengths), int(qsl[-1]) + tail
            T = triton.cdiv(L, BT)
            lean = torch.zeros(max(T, 1), dtype=torch.int32)
            _tile_owners_kernel[(T,)](qsl, lean, L, R, SL=SL, BT=BT, FIXUP=False, STARTS=starts)
            expected = [int(_lean_on_host(t * BT, qsl.tolist(), R, L, SL, BT, starts)) for t in range(T)]
            assert lean[:T].tolist() == expected, (lengths, tail, lean[:T].tolist())
            count = lean.clone()
            fixup_grid = (R + 1) * ((BT + SL - 2) // BT + 1) + triton.cdiv(SL, BT) + 1  # the launcher's
            _tile_owners_kernel[(fixup_grid,)](qsl, count, L, R, SL=SL, BT=BT, FIXUP=True, STARTS=starts)
            assert count[:T].tolist() == [1] * T, (lengths, tail, count[:T].tolist())


def _lean_on_host(t0: int, qsl: list[int], R: int, L: int, SL: int, BT: int, starts: bool) -> bool:
    """``slots.lean_tile``'s verdict in Python: no boundary in ``(t0 - SL, t0 + BT)`` around tile ``t0``, every tap
    row in ``[0, L)``; with ``starts`` also a tile whose first row starts a request that holds all its rows."""
    r = max([i for i in range(R) if qsl[i] <= t0], default=0)  # the last request starting at or before t0
    q0, q1 = qsl[r], qsl[r + 1] if r < R else qsl[r]
    clear = t0 >= SL and t0 + BT <= L
    clear_of = lambda q: q <= t0 - SL or q >= t0 + BT  # noqa: E731
    return (clear_of(q0) and clear_of(q1) and clear) or (starts and q0 == t0 and q1 >= t0 + BT and r < R and clear)


@triton.jit
def _requests_kernel(p_qsl, p_rows, p_out, p_near, p_lo, R, BT: tl.constexpr, W: tl.constexpr):
    """Row ``p``'s tile: ``find_request_near`` from ``p_lo[p]`` into ``p_near``, ``find_request`` into ``p_out``."""
    p = tl.program_id(0)
    rows = tl.load(p_rows + p * BT + tl.arange(0, BT))
    tl.store(p_out + p * BT + tl.arange(0, BT), find_request(rows, R, p_qsl))
    first_row, last_row = tl.min(rows, axis=0), tl.max(rows, axis=0)
    near = find_request_near(rows, first_row, last_row, tl.load(p_lo + p), R, p_qsl, W)
    tl.store(p_near + p * BT + tl.arange(0, BT), near)


@pytest.mark.interpreter
def test_interpreter_request_from_a_bracket_is_the_search():
    """``slots.find_request_near`` (one load of the boundaries from a bracket's start, the fixup tiles' search)
    gives ``find_request``'s requests for every tile of rows: brackets that hold the rows, ones that start
    past them or end before them, none (-1) or below, past the last request, runs of empty requests wider than
    the bracket, rows past the last request, R = 0 and 1. The boundaries sit between runs of zeros, so a load
    outside their ``R + 1`` entries reads a boundary at 0 and gives a wrong request."""
    gen = torch.Generator().manual_seed(5)
    BT, W = 4, 16
    for R in (0, 1, 3, 20, 70):
        lengths = torch.randint(0, 4, (R,), generator=gen) * torch.randint(0, 2, (R,), generator=gen)
        padded = torch.zeros(2 * W + R + 1, dtype=torch.int32)
        starts = padded[W : W + R + 1]
        starts[1:] = lengths.cumsum(0).to(torch.int32)
        L = int(starts[-1]) + 3
        t0 = torch.randint(0, L, (64,), generator=gen)
        rows = (t0[:, None] + torch.arange(BT)).to(torch.int32).contiguous()
        first = torch.searchsorted(starts[:R].to(torch.int64), t0, right=True) - 1  # the request of each t0
        lo = (first + torch.randint(-2 * W, 3, (64,), generator=gen)).clamp(min=-W - 2).to(torch.int32)
        out, near = torch.empty_like(rows), torch.empty_like(rows)
        _requests_kernel[(64,)](starts, rows, out, near, lo, R, BT=BT, W=W)
        expected = (torch.searchsorted(starts[:R].to(torch.int64), rows.to(torch.int64), right=True) - 1).clamp(min=0)
        assert torch.equal(out.to(torch.int64), expected), R
        assert torch.equal(near, out), (R, lo.tolist())

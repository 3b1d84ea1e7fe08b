"""Inputs of the conv family (its benchmark grids and roofline cost: ``conv_grids.py``; warmup:
``exactfuse.ops.conv.warmup``). The registry imports this module on first use (``registry.load_declarations``).

Every case draws fresh random values (never zeros) for inputs, residuals, weights and the whole state
pool, slot 0 included, so a write to the null slot or to a position the spec keeps shows up.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from exactfuse.ops.conv import (
    _causal_conv1d,
    _causal_conv1d_fn,
    _causal_conv1d_update,
    _short_conv,
    causal_conv1d_fn_backward,
)
from exactfuse.ops.conv.warmup import LAYOUTS, schema_args
from exactfuse.registry import Case
from exactfuse.testing.inputs import make_generator, randn
from exactfuse.utils import DTYPE_NAMES


def positional(op, case_id: str, args: tuple, kwargs: dict) -> Case:
    """A case with every argument positional, in the registered schema's order: ``torch.ops.exactfuse``
    schemas here are positional (``custom_op`` rejects keyword-only tensors), and tracing tools fake
    only positional tensors."""
    return Case(case_id, schema_args(op.native, args, kwargs))


def make_state(slots: int, C: int, W: int, layout: str, dtype, device, gen) -> torch.Tensor:
    """A random state pool, logical ``[slots, C, W]``, stored as ``layout``."""
    if layout == "cw":
        return randn((slots, C, W), dtype, device, gen)
    return randn((slots, W, C), dtype, device, gen).transpose(1, 2)


def _slots(n: int, slots: int, null: Sequence[int], gen, device) -> torch.Tensor:
    """``n`` distinct slots in ``1 .. slots-1``; positions in ``null`` get the null slot 0."""
    ids = torch.randperm(slots - 1, generator=gen)[:n] + 1
    for i in null:
        ids[i] = 0
    return ids.to(torch.int32)


def short_conv_case(
    case_id: str,
    mode: str,
    lengths: Sequence[int] = (),
    *,
    C: int,
    K: int = 4,
    D: int = 3,
    dtype: torch.dtype,
    device,
    gen: torch.Generator,
    decodes: int = 0,
    null: Sequence[int] = (),
    accepted: Sequence[int] | None = None,
    sql: int = 1,
    padding: int = 0,
    layout: str = "cw",
    slots: int = 64,
    outer: bool = True,
    init: bool = True,
    index_stride: int = 1,
    extra_rows: int = 0,
) -> Case:
    """One ``short_conv`` call. decode: ``decodes`` rows; spec/prefill: requests of ``lengths`` rows,
    then ``padding`` graph-padding rows. ``extra_rows`` > 0 adds physical rows outside the call and a
    shuffled token map (a mixed batch's part). ``index_stride`` makes ``state_indices`` a column view."""
    R = decodes if mode == "decode" else len(lengths)
    L = decodes if mode == "decode" else sum(lengths) + padding
    N = L + extra_rows
    SL = (K - 1) * D
    W = SL + (sql - 1 if mode == "spec" else 0) + (1 if layout == "wc" else 0)
    x, residual = randn((N, C), dtype, device, gen), randn((N, C), dtype, device, gen)
    outer_residual = randn((N, C), dtype, device, gen) if outer else None
    weight = randn((C, K), dtype, device, gen, 0.5)
    state = make_state(slots, C, W, layout, dtype, device, gen)
    sid = _slots(R, slots, null, gen, device)
    if index_stride > 1:
        table = torch.randint(1, slots, (R, index_stride), generator=gen, dtype=torch.int32)
        table[:, 0] = sid
        sid = table.to(device)[:, 0]
    else:
        sid = sid.to(device)
    kwargs = {"conv_mode": mode, "dilation": D}
    if mode != "decode":
        kwargs["query_start_loc"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        kwargs["query_start_loc"] = kwargs["query_start_loc"].to(device)
    if mode == "spec":
        kwargs["num_accepted_tokens"] = torch.tensor(accepted, dtype=torch.int32, device=device)
        kwargs["spec_query_len"] = sql
    if init and mode != "spec":
        kwargs["has_initial_state"] = (torch.arange(R) % 2 == 0).to(device)
    if extra_rows:
        kwargs["token_indices"] = torch.randperm(N, generator=gen)[:L].to(device)
    if outer_residual is not None:
        kwargs["outer_residual"] = outer_residual
    return positional(_short_conv, case_id, (x, residual, state, weight, sid), kwargs)


def _sized(quick: bool, device) -> tuple[int, int]:
    """(wide C, model C): interpreter-sized on the CPU."""
    if device.type == "cpu":
        return (144, 80) if quick else (320, 200)
    return 10240, 2048


def upstream_cases(device, dtype, gen, *, quick: bool = False, layout: str = "cw"):
    """Upstream's seven cases (spec §3.1), the mixed batch as its three calls through token maps (not in
    ``quick``)."""
    wide, model = _sized(quick, device)
    short = DTYPE_NAMES[dtype]
    kw = {"dtype": dtype, "device": device, "gen": gen, "layout": layout}
    long_len = 128 if not quick else 24
    # a channel count the decode block divides, so that the dense [C, W] slots take the flat run
    single = 512 if device.type != "cpu" else 128
    yield short_conv_case(f"decode-single-C{single}-{layout}-{short}", "decode", decodes=1, C=single, **kw)
    yield short_conv_case(
        f"decode-padded-K5-D1-{layout}-{short}", "decode", decodes=33, null=(32,), K=5, D=1, C=model, **kw
    )
    yield short_conv_case(f"prefill-{layout}-{short}", "prefill", (37, 0, 5, long_len), null=(1,), C=model, **kw)
    yield short_conv_case(
        f"prefill-strided-state-indices-C{wide}-{layout}-{short}", "prefill", (16, 676 if not quick else 40),
        C=wide, index_stride=4, **kw,
    )  # fmt: skip
    yield short_conv_case(
        f"spec-graph-padded-{layout}-{short}", "spec", (1, 4, 4, 0), accepted=(1, 2, 4, 1), sql=4, padding=4,
        null=(1,), C=model, **kw,
    )  # fmt: skip
    if not quick:  # quick: the token map runs in every mode in the mixed-varied cases below
        mixed = {"extra_rows": 6, "C": model, **kw}
        yield short_conv_case(f"mixed-spec-{layout}-{short}", "spec", (3, 4), accepted=(2, 4), sql=4, **mixed)
        yield short_conv_case(f"mixed-decode-{layout}-{short}", "decode", decodes=1, **mixed)
        yield short_conv_case(f"mixed-prefill-{layout}-{short}", "prefill", (5,), **mixed)
    varied = {"C": 640 if device.type != "cpu" or not quick else 160, "K": 3, "D": 2, **kw}
    yield short_conv_case(
        f"mixed-varied-spec-C{varied['C']}-K3-D2-{layout}-{short}", "spec", (1, 2), accepted=(0, 1), sql=3,
        extra_rows=13, **varied,
    )  # fmt: skip
    yield short_conv_case(
        f"mixed-varied-decode-C{varied['C']}-K3-D2-{layout}-{short}", "decode", decodes=2, null=(1,),
        extra_rows=13, **varied,
    )  # fmt: skip
    yield short_conv_case(
        f"mixed-varied-prefill-C{varied['C']}-K3-D2-{layout}-{short}", "prefill", (0, 8, 3), null=(1,),
        extra_rows=5, **varied,
    )  # fmt: skip


# quick's sweep: one (K, D) a state layout, so that K in {2, 5} and D in {1, 3} each run once and every mode
# runs in both layouts (each (K, D, mode, layout) is a Triton specialization of its own); K2-D1 keeps
# decode's BW = 1 window. The R = 0 and no-init cases take the layout's (K, D) too: L, R and N are
# do_not_specialize, so they compile nothing the sweep does not (spec's R = 0 keeps its SQL = 2).
QUICK_SWEEP = {"cw": (5, 3), "wc": (2, 1)}


def sweep_cases(device, dtype, gen, *, quick: bool = False):
    """K x D x mode x layout on a channel count no block divides (``quick``: ``QUICK_SWEEP``); R = 0 in every
    mode."""
    short = DTYPE_NAMES[dtype]
    C = 200 if device.type == "cpu" else 1000
    for i, layout in enumerate(LAYOUTS):
        kw = {"dtype": dtype, "device": device, "gen": gen, "layout": layout, "C": C}
        combos = [(K, D) for K in (2, 3, 4, 5) for D in (1, 2, 3)] if not quick else [QUICK_SWEEP[layout]]
        for K, D in combos:
            tag = f"K{K}-D{D}-{layout}-{short}"
            yield short_conv_case(f"decode-{tag}", "decode", decodes=5, null=(2,), K=K, D=D, **kw)
            yield short_conv_case(
                f"spec-{tag}", "spec", (3, 1, 0, 2), accepted=(3, 0, 1, 2), sql=3, padding=2, null=(1,),
                K=K, D=D, **kw,
            )  # fmt: skip
            yield short_conv_case(
                f"prefill-{tag}", "prefill", (2, 0, 9, 1), null=(3,), padding=1, K=K, D=D, outer=K % 2 == 0,
                **kw,
            )  # fmt: skip
        taps = {} if not quick else dict(zip(("K", "D"), QUICK_SWEEP[layout], strict=True))
        for mode in ("decode", "spec", "prefill") if not quick or i == 0 else ():
            extra = {"accepted": (), "sql": 2} if mode == "spec" else {}
            yield short_conv_case(f"{mode}-R0-{layout}-{short}", mode, (), padding=0, **extra, **taps, **kw)
            if mode != "decode":
                yield short_conv_case(f"{mode}-R0-padded-{layout}-{short}", mode, (), padding=3, **extra, **taps, **kw)
        yield short_conv_case(f"decode-no-init-{layout}-{short}", "decode", decodes=4, init=False, **taps, **kw)


def _in_layout(combos: list, layout_index: int, quick: bool) -> list:
    """The (K, D) combinations a state layout's cases take: all of them, or with ``quick`` every
    ``len(LAYOUTS)``-th, by turns, so that the layouts share the combinations and each runs once."""
    return combos if not quick else combos[layout_index :: len(LAYOUTS)]


def _layout_taps(full: list, layout_index: int, quick: bool, suffix: str):
    """``(K, D, tag)`` for the Mamba entry points' cases in one state layout: the ``full`` taps x dilations,
    or with ``quick`` two of them shared by the layouts (:func:`_in_layout`); ``tag`` ends in ``suffix``."""
    for K, D in _in_layout(full if not quick else [(4, 1), (3, 2)], layout_index, quick):
        yield K, D, f"K{K}-D{D}-{suffix}"


@_short_conv.inputs
def short_conv_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    """Upstream's cases (in one state layout with ``quick``), then the K x D x mode sweep."""
    gen = make_generator(seed)
    for layout in LAYOUTS if not quick else LAYOUTS[:1]:
        yield from upstream_cases(device, dtype, gen, quick=quick, layout=layout)
    yield from sweep_cases(device, dtype, gen, quick=quick)


def causal_case(case_id, lengths, *, C, K, D, dtype, device, gen, bias=True, activation="silu", state=True,
                layout="cw", pad=(), init=True, one_sequence=False, packed=None, wide=False) -> Case:  # fmt: skip
    """One ``causal_conv1d`` call over sequences of ``lengths`` (``one_sequence``: no query_start_loc).
    ``packed``: a ``seq_idx`` (no state), each of the ``lengths`` rows split into runs of its entry's
    lengths, numbered from 0 in each row, then padding (-1) to the row's end. ``wide``: fp32 weight and
    bias (Dao's convention)."""
    T, R, SL = sum(lengths), len(lengths), (K - 1) * D
    x = randn((T, C), dtype, device, gen)
    w_dtype = torch.float32 if wide else dtype
    args = (x, randn((C, K), w_dtype, device, gen, 0.5), randn((C,), w_dtype, device, gen) if bias else None)
    kwargs = {"activation": activation, "dilation": D}
    if packed is not None:
        state = False
        ids = [[i for i, n in enumerate(runs) for _ in range(n)] + [-1] * (L - sum(runs))
               for L, runs in zip(lengths, packed, strict=True)]  # fmt: skip
        kwargs["seq_idx"] = torch.tensor([i for row in ids for i in row], dtype=torch.int32, device=device)
    if not one_sequence:
        kwargs["query_start_loc"] = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
        kwargs["query_start_loc"] = kwargs["query_start_loc"].to(device)
    if state:
        slots = R + 3
        kwargs["conv_state"] = make_state(slots, C, SL + (layout == "wc"), layout, dtype, device, gen)
        sid = torch.randperm(slots, generator=gen)[:R].to(torch.int32)
        for i in pad:
            sid[i] = -1
        kwargs["state_indices"] = sid.to(device)
        if init:
            kwargs["has_initial_state"] = (torch.arange(R) % 2 == 1).to(device)
    return positional(_causal_conv1d, case_id, args, kwargs)


@_causal_conv1d.inputs
def causal_conv1d_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    gen = make_generator(seed)
    short = DTYPE_NAMES[dtype]
    C = 200 if device.type == "cpu" else 2000
    for i, layout in enumerate(LAYOUTS):
        kw = {"dtype": dtype, "device": device, "gen": gen, "layout": layout, "C": C}
        for K, D, tag in _layout_taps([(2, 1), (4, 1), (4, 2), (5, 3)], i, quick, f"{layout}-{short}"):
            yield causal_case(f"varlen-{tag}", (7, 0, 1, 12), pad=(2,), K=K, D=D, **kw)
            yield causal_case(f"varlen-nobias-noact-{tag}", (3, 5), bias=False, activation=None, K=K, D=D, **kw)
            yield causal_case(f"varlen-no-init-{tag}", (4, 9), init=False, K=K, D=D, **kw)
        yield causal_case(f"one-sequence-{layout}-{short}", (11,), one_sequence=True, K=4, D=1, **kw)
        yield causal_case(f"R0-{layout}-{short}", (), K=4, D=1, **kw)
    kw = {"dtype": dtype, "device": device, "gen": gen, "C": C}
    yield causal_case(f"stateless-{short}", (6, 2), state=False, K=4, D=2, **kw)
    # Dao's packed sequences: runs in each row, then padding (quick: K4-D1; K3-D2 runs in varlen-wc)
    for K, D in ((4, 1), (3, 2)) if not quick else ((4, 1),):
        packed = ((3, 1, 5), (17,), (1, 1, 2, 6))
        yield causal_case(f"seq-idx-K{K}-D{D}-{short}", (12, 17, 13), packed=packed, K=K, D=D, **kw)
    yield causal_case(f"seq-idx-one-row-{short}", (40,), packed=((9, 20, 8),), one_sequence=True, K=4, D=1, **kw)
    # fp32 weight and bias with x's dtype (Dao's convention); quick: each call once, the layouts by turns
    for i, layout in enumerate(LAYOUTS):
        tag = f"{layout}-{short}"
        wide = {"layout": layout, "wide": True, **kw}
        if not quick or i == 0:
            yield causal_case(f"fp32-weight-varlen-{tag}", (7, 0, 1, 12), pad=(2,), K=4, D=1, **wide)
        if not quick or i == 1:
            yield causal_case(f"fp32-weight-noact-{tag}", (5, 9), activation=None, K=3, D=2, **wide)
    yield causal_case(f"fp32-weight-seq-idx-{short}", (12, 17), packed=((3, 9), (17,)), K=4, D=1, wide=True, **kw)


def fn_case(case_id, lengths, *, grad: bool = False, initial: bool = False, **kw) -> Case:
    """A ``causal_conv1d_fn`` case: :func:`causal_case` without a state, with random initial states
    (``initial``); ``grad``: with the output's gradient in front, a ``causal_conv1d_fn_backward`` case."""
    x, weight, bias, activation, dilation, _, qsl, _, _, _, seq_idx, _ = causal_case(
        case_id, lengths, state=False, **kw
    ).args
    R, C, SL = len(lengths) if qsl is not None else 1, x.shape[1], (weight.shape[1] - 1) * dilation
    states = randn((R, C, SL), x.dtype, x.device, kw["gen"]) if initial else None
    args = (x, weight, bias, activation, dilation, qsl, seq_idx, states)
    if grad:
        return positional(causal_conv1d_fn_backward, case_id, (randn(x.shape, x.dtype, x.device, kw["gen"]), *args), {})
    return positional(_causal_conv1d_fn, case_id, args, {})


def _fn_cases(device, dtype, *, quick: bool, seed: int, grad: bool):
    """Sequences of several lengths (one empty), K and dilation, with and without bias and SiLU, one
    sequence without ``query_start_loc``, Dao's packed ``seq_idx`` rows, fp32 weights with 16-bit x,
    initial states."""
    gen = make_generator(seed)
    short = DTYPE_NAMES[dtype]
    kw = {"dtype": dtype, "device": device, "gen": gen, "C": 200 if device.type == "cpu" else 2000, "grad": grad}
    for K, D in ((2, 1), (4, 1), (4, 2), (5, 3)) if not quick else ((4, 1), (3, 2)):
        yield fn_case(f"varlen-K{K}-D{D}-{short}", (7, 0, 1, 12), K=K, D=D, **kw)
        yield fn_case(f"varlen-nobias-noact-K{K}-D{D}-{short}", (3, 5), bias=False, activation=None, K=K, D=D, **kw)
    yield fn_case(f"one-sequence-{short}", (70,), one_sequence=True, K=4, D=1, **kw)
    yield fn_case(f"seq-idx-{short}", (12, 17, 13), packed=((3, 1, 5), (17,), (1, 1, 2, 6)), K=4, D=1, **kw)
    yield fn_case(f"fp32-weight-{short}", (7, 0, 1, 12), K=4, D=1, wide=True, **kw)
    yield fn_case(f"fp32-weight-noact-{short}", (5, 9), activation=None, K=3, D=2, wide=True, **kw)
    yield fn_case(f"R0-{short}", (), K=4, D=1, **kw)
    yield fn_case(f"initial-states-K4-D1-{short}", (7, 0, 1, 12), initial=True, K=4, D=1, **kw)
    yield fn_case(f"initial-states-noact-K3-D2-{short}", (3, 9), initial=True, activation=None, K=3, D=2, **kw)


@_causal_conv1d_fn.inputs
def causal_conv1d_fn_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    yield from _fn_cases(device, dtype, quick=quick, seed=seed, grad=False)


@causal_conv1d_fn_backward.inputs
def causal_conv1d_fn_backward_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    yield from _fn_cases(device, dtype, quick=quick, seed=seed, grad=True)


def update_case(
    case_id, B, Lq, *, C, K, D, dtype, device, gen, spec=False, layout="cw", pad=(), bias=True, activation="silu",
    wide=False,
) -> Case:  # fmt: skip
    """One ``causal_conv1d_update`` call: ``[B, C]`` when ``Lq`` is None, else ``[B, Lq, C]``; ``wide``:
    fp32 weight and bias."""
    SL = (K - 1) * D
    W = SL + ((Lq or 1) - 1 if spec else 0) + (layout == "wc")
    slots = B + 2
    x = randn((B, C) if Lq is None else (B, Lq, C), dtype, device, gen)
    state = make_state(slots, C, W, layout, dtype, device, gen)
    w_dtype = torch.float32 if wide else dtype
    args = (x, state, randn((C, K), w_dtype, device, gen, 0.5), randn((C,), w_dtype, device, gen) if bias else None)
    sid = torch.randperm(slots, generator=gen)[:B].to(torch.int32)
    for i in pad:
        sid[i] = -1
    kwargs = {"dilation": D, "state_indices": sid.to(device), "activation": activation}
    if spec:
        kwargs["num_accepted_tokens"] = torch.randint(0, Lq + 1, (B,), generator=gen, dtype=torch.int32).to(device)
    return positional(_causal_conv1d_update, case_id, args, kwargs)


def last_k_update_case(case_id, B, *, C, K, dtype, device, gen) -> Case:
    """One decode step of ``causal_conv1d_update`` with FLA's state instead of a slot cache: request ``r``'s
    last ``K`` inputs in row ``r`` of ``[B, C, K]`` (``history_at="end"``, no state indices), SiLU, bias."""
    x = randn((B, C), dtype, device, gen)
    args = (
        x,
        randn((B, C, K), dtype, device, gen),
        randn((C, K), dtype, device, gen, 0.5),
        randn((C,), dtype, device, gen),
    )
    return positional(_causal_conv1d_update, case_id, args, {"activation": "silu", "history_at": "end"})


@_causal_conv1d_update.inputs
def causal_conv1d_update_inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    gen = make_generator(seed)
    short = DTYPE_NAMES[dtype]
    C = 200 if device.type == "cpu" else 2000
    for i, layout in enumerate(LAYOUTS):
        kw = {"dtype": dtype, "device": device, "gen": gen, "layout": layout, "C": C}
        for K, D, tag in _layout_taps([(2, 1), (4, 1), (4, 3)], i, quick, f"{layout}-{short}"):
            yield update_case(f"decode-{tag}", 5, None, pad=(1,), K=K, D=D, **kw)
            yield update_case(f"chunk-Lq3-{tag}", 4, 3, pad=(0,), K=K, D=D, **kw)
            yield update_case(f"spec-Lq4-{tag}", 4, 4, spec=True, pad=(2,), K=K, D=D, bias=False, **kw)
        yield update_case(f"B0-{layout}-{short}", 0, None, K=4, D=1, **kw)
        # fp32 weight and bias; quick: each call once, the layouts by turns
        if not quick or i == 0:
            yield update_case(f"fp32-weight-decode-{layout}-{short}", 5, None, pad=(1,), K=4, D=1, wide=True, **kw)
        if not quick or i == 1:
            yield update_case(f"fp32-weight-spec-Lq3-{layout}-{short}", 4, 3, spec=True, K=3, D=2, wide=True, **kw)

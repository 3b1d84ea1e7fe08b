"""The conv family's Triton provider: the host launchers of its kernels (``update.py`` in decode, ``spec.py`` in spec
mode, ``lean.py`` and ``prefill.py`` in prefill, then in spec and prefill mode ``state.py``'s write-back launch;
``grad_kernels.py`` for the backward); the ops' providers; and what they take.
"""

from __future__ import annotations

import torch
import triton

from exactfuse.ops.conv import calls, heuristics, windows
from exactfuse.ops.conv.decode import window_owned
from exactfuse.ops.conv.grad_kernels import conv_grad_init_kernel, conv_grad_rows_kernel, conv_grad_x_kernel
from exactfuse.ops.conv.lean import conv_lean_kernel
from exactfuse.ops.conv.prefill import conv_prefill_kernel
from exactfuse.ops.conv.rows import INIT_CODES, MODE_CODES
from exactfuse.ops.conv.spec import conv_spec_kernel
from exactfuse.ops.conv.state import conv_state_kernel
from exactfuse.ops.conv.update import conv_decode_kernel
from exactfuse.ops.fastmath import SILU, chosen_formula
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic

NO_ACTIVATION = -1  # the kernels' ACT without an activation (else a fastmath formula id)


def launch_conv(
    call: calls.ConvCall,
    *,
    out: torch.Tensor | None = None,
    config: heuristics.ConvConfig | None = None,
    head: int = 0,
) -> None:
    """Launch the row kernels (decode: the decode kernel; spec: the spec kernel; prefill: the lean kernel, then
    the prefill kernel's FIXUP launch unless it took every tile, or the prefill kernel alone), then (spec,
    prefill, with a state) the write-back kernel.

    ``call``: one :class:`~exactfuse.ops.conv.calls.ConvCall` (read by ``calls.short_conv_call`` and its
    siblings), as :func:`exactfuse.ops.conv.native.conv_reference` computes it; ``num_accepted_tokens``
    outside spec mode and ``has_initial_state`` unless ``init="tensor"`` are not passed to the kernels.
    ``out [L, C]`` receives the conv output when there is no ``residual``; ``config`` (sweeps, tests)
    replaces ``heuristics.conv_config``'s choice. ``head``: the positions of each ``conv_state`` window before
    its history (Dao's wide window with the history at its end, decode and prefill), which the write-back
    shifts with the history; ``conv_state`` is the whole state. Nothing here branches on a row, request or
    slot count: the grids are expressions in them, and an empty grid launches nothing. The kernels read
    ``query_start_loc`` as int32: an int64 one (FLA's ``cu_seqlens``)
    is converted here, one device op (the eager check has bounded its values by the row count).
    """
    x, weight, mode, conv_state = call.x, call.weight, call.mode, call.conv_state
    query_start_loc = call.query_start_loc
    if query_start_loc is not None and query_start_loc.dtype == torch.int64:
        query_start_loc = query_start_loc.to(torch.int32)
    num_accepted_tokens = call.num_accepted_tokens if mode == "spec" else None
    has_initial_state = call.has_initial_state if call.init == "tensor" else None
    N, C = x.shape
    K = weight.shape[1]
    SL = (K - 1) * call.dilation
    SQL = call.spec_query_len if mode == "spec" else 1
    L = call.token_indices.shape[0] if call.token_indices is not None else N
    R = L if mode == "decode" else query_start_loc.shape[0] - 1
    has_state = conv_state is not None
    state = conv_state if has_state else x
    s_strides = conv_state.stride() if has_state else (0, 0, 0)
    contiguous = not is_symbolic(s_strides[1]) and s_strides[1] == 1  # a symbolic stride is not 1
    s_align = _stride_alignment(s_strides[1])
    w_align = _stride_alignment(weight.stride(0))
    dense = mode == "decode" and has_state and _dense_slots(s_strides, head + SL)  # only decode reads it
    # prefill without a token map or seq_idx: the lean kernel takes the tiles inside one request (or outside
    # all), then the prefill kernel's FIXUP launch the others, unless the lean kernel takes every tile
    lean = mode == "prefill" and call.token_indices is None and call.seq_idx is None
    cfg = config or heuristics.conv_config(C, head + SL + SQL - 1, mode, contiguous, dense, lean)
    lean = lean and cfg.lean
    every_tile = lean and lean_takes_every_tile(has_state, cfg)
    slots = conv_state.shape[0] if has_state else 1
    # the flags of every row kernel and the write-back kernel (which also takes the mode and the spec's rows)
    request_flags = dict(
        K=K,
        D=call.dilation,
        HAS_SID=call.state_indices is not None,
        INIT=INIT_CODES[call.init],
        HAS_TOKEN_MAP=call.token_indices is not None,
        HEAD=head,
    )
    flags = dict(MODE=MODE_CODES[mode], SQL=SQL, **request_flags)
    sid = call.state_indices if call.state_indices is not None else x
    qsl = query_start_loc if query_start_loc is not None else x
    acc = num_accepted_tokens if num_accepted_tokens is not None else x
    hinit = has_initial_state if has_initial_state is not None else x
    tok = call.token_indices if call.token_indices is not None else x
    bias = call.bias if call.bias is not None else x
    outer = call.outer_residual if call.outer_residual is not None else x
    outer_stride = call.outer_residual.stride(0) if call.outer_residual is not None else 0
    seq = call.seq_idx if call.seq_idx is not None else x
    sid_stride = call.state_indices.stride(0) if call.state_indices is not None else 0
    target = call.residual if call.residual is not None else out
    # fp32 weights: the SiLU reads the fp32 conv, so it takes fp32's formula
    act_dtype = torch.float32 if weight.dtype == torch.float32 else x.dtype
    act = chosen_formula("silu", act_dtype, x.device) if call.activation == "silu" else NO_ACTIVATION
    common = dict(
        HAS_STATE=has_state, HAS_RESIDUAL=call.residual is not None, HAS_OUTER=call.outer_residual is not None,
        HAS_BIAS=call.bias is not None, ACT=act, BC=cfg.BC, BT=cfg.BT, num_warps=cfg.num_warps,
        EVEN_C=not is_symbolic(C) and C % cfg.BC == 0,
    )  # fmt: skip
    if lean:
        torch.library.wrap_triton(conv_lean_kernel)[(triton.cdiv(L, cfg.BT), triton.cdiv(C, cfg.BC))](
            x, weight, bias, target, outer, target, sid, qsl, hinit, L, R, N, C, slots, call.null_slot,
            x.stride(0), target.stride(0), outer_stride,
            target.stride(0), weight.stride(0), weight.stride(1), sid_stride,
            K=K, D=call.dilation, HAS_SID=flags["HAS_SID"], INIT=flags["INIT"], UNROLL=cfg.unroll,
            W_ALIGN=w_align, W_WORD=_weight_word(weight), EVERY_TILE=every_tile, **common,
        )  # fmt: skip
    rows = (x, weight, bias, target, outer, target, state, sid, qsl)
    sizes = (L, R, N, C, slots, call.null_slot)
    strides = (x.stride(0), target.stride(0), outer_stride, target.stride(0), weight.stride(0), weight.stride(1))
    channel_blocks = triton.cdiv(C, cfg.BC)
    if mode == "prefill" and not every_tile:
        boundary_tiles = (cfg.BT + SL - 2) // cfg.BT + 1  # tiles one boundary can leave (slots.fixup_tile's NB)
        rows_grid = (R + 1) * boundary_tiles + triton.cdiv(SL, cfg.BT) + 1 if lean else triton.cdiv(L, cfg.BT)
        torch.library.wrap_triton(conv_prefill_kernel)[(rows_grid, channel_blocks)](
            *rows, hinit, tok, seq, *sizes, *strides, *s_strides, sid_stride,
            UNROLL=1 if lean else cfg.unroll, HAS_SEQ_IDX=call.seq_idx is not None, FIXUP=lean, **common,
            **request_flags,
        )  # fmt: skip
    elif mode == "spec":
        torch.library.wrap_triton(conv_spec_kernel)[(triton.cdiv(L, cfg.BT), channel_blocks)](
            *rows, acc, hinit, tok, *sizes, *strides, *s_strides, sid_stride,
            SQL=SQL, UNROLL=cfg.unroll, **common, **request_flags,
        )  # fmt: skip
    elif mode == "decode":
        flat = cfg.flat_window and _dense_windows(s_strides, head + SL, C, cfg.BC, state.element_size())
        scalar_window = has_state and _scalar_window(contiguous, s_align, head + SL)
        window_tile = cfg.window_tile and cfg.BW <= heuristics.DECODE_WINDOW_TILE_MAX
        row_blocks = triton.cdiv(L, cfg.BT)
        grid = (row_blocks * channel_blocks, 1) if cfg.channels_first else (row_blocks, channel_blocks)
        torch.library.wrap_triton(conv_decode_kernel)[grid](
            *rows[:-1], hinit, tok, *sizes, *strides, *s_strides, sid_stride,
            BW=cfg.BW, S_ALIGN=s_align, W_ALIGN=w_align, CHANNELS_FIRST=cfg.channels_first, FLAT_WINDOW=flat,
            SCALAR_WINDOW=scalar_window, WINDOW_TILE=window_tile, OWNED=window_owned(flat, cfg.BC, cfg.num_warps),
            **common, **request_flags)  # fmt: skip
    if mode != "decode" and has_state:
        torch.library.wrap_triton(conv_state_kernel)[(R, triton.cdiv(C, cfg.BC_STATE))](
            x, state, sid, qsl, acc, hinit, tok,
            L, R, N, C, slots, call.null_slot,
            x.stride(0), *s_strides, sid_stride,
            BC=cfg.BC_STATE, BW=cfg.BW, num_warps=cfg.num_warps, **flags,
        )  # fmt: skip


def lean_takes_every_tile(has_state: bool, cfg: heuristics.ConvConfig) -> bool:
    """Whether the lean prefill kernel takes every tile in one launch (EVERY_TILE): without a state and in runs
    of rows, where the boundary tiles' row search adds no registers (docs/heuristics.md, the prefill rule)."""
    return not has_state and cfg.unroll > 1


def _dense_slots(s_strides, window: int) -> bool:
    """Whether each slot's ``[C, window]`` block is dense: unit window stride, the channel stride the window.
    False for a symbolic stride (cache constants in practice, but not ones the launcher may read under
    torch.compile)."""
    stride_c, stride_w = s_strides[1], s_strides[2]
    if is_symbolic(stride_c) or is_symbolic(stride_w):
        return False
    return stride_w == 1 and stride_c == window


def _dense_windows(s_strides, window: int, C: int, BC: int, element_size: int) -> bool:
    """Whether each slot's channel blocks are dense runs of ``BC · window`` elements (:func:`_dense_slots`) with
    ``BC`` dividing ``C`` and a multiple of the elements in 16 bytes: the flat decode path's condition."""
    if is_symbolic(C) or not _dense_slots(s_strides, window):
        return False
    return C % BC == 0 and BC % (16 // element_size) == 0


def _weight_word(weight: torch.Tensor) -> int:
    """The taps a channel's weights make one word of (2 or 4: 32 or 64 bits), where they are 16-bit values with
    unit tap stride, the channel stride the tap count and an aligned start; else 0 (``lean.tile_weights``).
    0 for a symbolic stride or offset (model constants in practice, not ones the launcher may read under
    torch.compile). The allocator aligns a tensor's storage to at least 256 bytes."""
    K = weight.shape[1]
    facts = (*weight.stride(), weight.storage_offset())
    if weight.element_size() != 2 or K not in (2, 4) or any(is_symbolic(v) for v in facts):
        return 0
    stride_c, stride_k, offset = facts
    return K if stride_k == 1 and stride_c == K and offset % K == 0 else 0


def _scalar_window(contiguous: bool, s_align: int, window: int) -> bool:
    """Whether a decode step's register window is loaded one ``[BC]`` vector a position (``SCALAR_WINDOW``):
    ``[slot, C, W]`` storage (``contiguous`` false) whose channel stride no power of two above 1 divides
    (``s_align``), over at most :data:`heuristics.SCALAR_WINDOW_MAX` positions."""
    return not contiguous and s_align == 1 and window <= heuristics.SCALAR_WINDOW_MAX


def _stride_alignment(stride) -> int:
    """The largest power of two (at most 16) dividing a state stride, for the kernels' vector accesses; 1 for a
    symbolic stride (a model constant in practice, but not one the launcher may read under torch.compile)."""
    if is_symbolic(stride) or stride <= 0:
        return 1
    return min(stride & -stride, 16)


def short_conv_triton(
    x: torch.Tensor,
    residual: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    state_indices: torch.Tensor,
    conv_mode: str,
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    spec_query_len: int = 1,
    token_indices: torch.Tensor | None = None,
    outer_residual: torch.Tensor | None = None,
) -> None:
    launch_conv(
        calls.short_conv_call(
            x, residual, conv_state, weight, state_indices, conv_mode, dilation, query_start_loc,
            num_accepted_tokens, has_initial_state, spec_query_len, token_indices, outer_residual,
        )
    )  # fmt: skip


def _history_head(conv_state, weight, dilation, history_at) -> int:
    """The positions before each slot's history: with Dao's wide window (``history_at="end"``) the ``W - SL``
    before its last ``SL``, which the kernels shift with it; else 0. The kernels take the whole state (its
    windows' own alignment visible to the compiler)."""
    if history_at != "end" or conv_state is None:
        return 0
    return conv_state.shape[2] - (weight.shape[1] - 1) * dilation


def causal_conv1d_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    conv_state: torch.Tensor | None = None,
    query_start_loc: torch.Tensor | None = None,
    state_indices: torch.Tensor | None = None,
    has_initial_state: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    seq_idx: torch.Tensor | None = None,
    history_at: str = "start",
) -> torch.Tensor:
    out = empty(x.shape, x.dtype, x.device)
    head = _history_head(conv_state, weight, dilation, history_at)
    call = calls.causal_conv1d_call(
        x, weight, bias, activation, dilation, conv_state, query_start_loc, state_indices, has_initial_state,
        pad_slot_id, seq_idx,
    )  # fmt: skip
    launch_conv(call, out=out, head=head)
    return out


def causal_conv1d_update_triton(
    x: torch.Tensor,
    conv_state: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    state_indices: torch.Tensor | None = None,
    num_accepted_tokens: torch.Tensor | None = None,
    pad_slot_id: int = -1,
    history_at: str = "start",
) -> torch.Tensor:
    out = empty(x.shape, x.dtype, x.device)
    head = _history_head(conv_state, weight, dilation, history_at)
    call = calls.causal_conv1d_update_call(
        x, conv_state, weight, bias, activation, dilation, state_indices, num_accepted_tokens, pad_slot_id
    )
    launch_conv(call, out=out.view(call.x.shape), head=head)
    return out


def causal_conv1d_fn_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> torch.Tensor:
    """The forward kernel of ``causal_conv1d``, without a state; with initial states, on a copy of them as
    the state every request reads (the write-back goes to the copy)."""
    state, every = windows.initial_window(initial_states)
    return causal_conv1d_triton(x, weight, bias, activation, dilation, state, query_start_loc, None, every, -1, seq_idx)


def causal_conv1d_fn_backward_triton(
    grad: torch.Tensor,
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: torch.Tensor | None = None,
    activation: str | None = "silu",
    dilation: int = 1,
    query_start_loc: torch.Tensor | None = None,
    seq_idx: torch.Tensor | None = None,
    initial_states: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return launch_conv_grad(grad, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states)


# channels of one program of the initial states' gradient: R x SL x C values, a few per request, so one
# small tile a program; its time is the launch's
INIT_GRAD_BC = 256


def launch_conv_grad(
    grad, x, weight, bias, activation, dilation, query_start_loc, seq_idx, initial_states=None,
    config: heuristics.GradConfig | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:  # fmt: skip
    """``(dx, dweight, dbias, dinitial_states)`` from the two gradient kernels (``grad_kernels.py``); the
    weight and bias gradients are the row programs' partial sums added over the programs in a fixed order.
    ``config``: ``heuristics.conv_grad_config`` unless given (tests)."""
    T, C = x.shape
    K = weight.shape[1]
    # the kernels read dy's rows with unit channel stride: a gradient that is not (y.sum()'s expanded one,
    # strides (0, 0)) is made dense first, one copy
    if is_symbolic(grad.stride(-1)) or grad.stride(-1) != 1:
        grad = grad.contiguous()
    qsl = calls.one_sequence(x) if query_start_loc is None else query_start_loc
    if qsl.dtype == torch.int64:
        qsl = qsl.to(torch.int32)
    R = qsl.shape[0] - 1
    cfg = config or heuristics.conv_grad_config(C)
    programs = triton.cdiv(T, cfg.BT * cfg.steps)
    # dconv is a 16-bit value unless an fp32 weight's SiLU made it (the spec rounds the SiLU's gradient to
    # x's dtype for 16-bit weights, and without an activation dconv is the output's gradient): stored so
    dconv_dtype = torch.float32 if weight.dtype == torch.float32 and activation == "silu" else x.dtype
    dconv = torch.empty((T, C), dtype=dconv_dtype, device=x.device)
    dw_parts = torch.empty((programs, K, C), dtype=torch.float32, device=x.device)
    # without a bias, a placeholder of its own: an argument that aliases a written one comes back from
    # torch.compile's functional form of the launch as a second, unwritten copy when its analysis of what the
    # kernel writes fails
    db_parts = torch.empty((programs, C) if bias is not None else (1,), dtype=torch.float32, device=x.device)
    dx = empty(x.shape, x.dtype, x.device)
    seq = seq_idx if seq_idx is not None else qsl
    init = initial_states if initial_states is not None else x
    i_strides = initial_states.stride() if initial_states is not None else (0, 0, 0)
    torch.library.wrap_triton(conv_grad_rows_kernel)[(programs, triton.cdiv(C, cfg.BC))](
        grad, x, weight, bias if bias is not None else weight, qsl, seq, init, dconv, dw_parts, db_parts, T, R, C,
        grad.stride(0), x.stride(0), weight.stride(0), weight.stride(1), *i_strides,
        K=K, D=dilation, HAS_BIAS=bias is not None, ACT=SILU if activation == "silu" else NO_ACTIVATION,
        HAS_SEQ_IDX=seq_idx is not None, HAS_INIT=initial_states is not None, BT=cfg.BT, BC=cfg.BC,
        STEPS=cfg.steps, W_ALIGN=_stride_alignment(weight.stride(0)), W_WORD=_weight_word(weight),
        num_warps=cfg.num_warps,
    )  # fmt: skip
    torch.library.wrap_triton(conv_grad_x_kernel)[(triton.cdiv(T, cfg.DX_BT), triton.cdiv(C, cfg.DX_BC))](
        dconv, weight, qsl, seq, dx, T, R, C, dx.stride(0), weight.stride(0), weight.stride(1),
        K=K, D=dilation, HAS_SEQ_IDX=seq_idx is not None, BT=cfg.DX_BT, BC=cfg.DX_BC, num_warps=cfg.dx_warps,
    )  # fmt: skip
    d_weight = dw_parts.sum(0).t().contiguous().to(weight.dtype)  # [C, K], as the spec's
    d_bias = db_parts.sum(0).to(bias.dtype) if bias is not None else dw_parts.new_empty((0,))
    if initial_states is None:
        return dx, d_weight, d_bias, dw_parts.new_empty((0,))
    SL = (K - 1) * dilation
    d_init = torch.empty((R, SL, C), dtype=initial_states.dtype, device=x.device)
    torch.library.wrap_triton(conv_grad_init_kernel)[(R, triton.cdiv(C, INIT_GRAD_BC))](
        dconv, weight, qsl, d_init, C, dconv.stride(0), weight.stride(0), weight.stride(1),
        K=K, D=dilation, BC=INIT_GRAD_BC,
    )  # fmt: skip
    return dx, d_weight, d_bias, d_init.transpose(1, 2)


# ------------------------------------------------------------------ what the kernels take (supports_args)
def _reads(*named: tuple[str, torch.Tensor | None]) -> bool | str:
    for name, t in named:
        if t is not None and (reason := platform.triton_reads(name, t)) is not True:
            return reason
    return True


def short_conv_supports(x, residual, conv_state, *_, **__) -> bool | str:
    """CUDA tensors (or CPU ones under the interpreter, not bf16); any state strides."""
    return _reads(("x", x), ("conv_state", conv_state))


def causal_conv1d_supports(x, weight, bias=None, activation="silu", dilation=1, conv_state=None, *_, **__):
    return _reads(("x", x), ("conv_state", conv_state))


def causal_conv1d_update_supports(x, conv_state, *_, **__) -> bool | str:
    return _reads(("x", x), ("conv_state", conv_state))


def causal_conv1d_fn_supports(x, weight, *_, **__) -> bool | str:
    return _reads(
        ("x", x),
    )


def causal_conv1d_fn_backward_supports(grad, x, *_, **__) -> bool | str:
    """CUDA tensors (or CPU ones under the interpreter, not bf16); ``grad`` of any strides (the launcher makes
    one without unit channel stride dense; the checks ask x's shape of it)."""
    return _reads(("grad", grad), ("x", x))

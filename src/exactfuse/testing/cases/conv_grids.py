"""Benchmark grids and roofline cost of the conv family, built from its cases (``conv.py``). The registry
imports this module on first use (``registry.load_declarations``)."""

from __future__ import annotations

from exactfuse.ops.conv import (
    _causal_conv1d,
    _causal_conv1d_fn,
    _causal_conv1d_update,
    _short_conv,
    calls,
    causal_conv1d_fn_backward,
)
from exactfuse.ops.conv.warmup import LAYOUTS
from exactfuse.registry import LazyCase
from exactfuse.testing.cases.conv import causal_case, fn_case, last_k_update_case, short_conv_case, update_case
from exactfuse.testing.inputs import make_generator


# ------------------------------------------------------------- bench grids
def _lazy(case_id: str, make, seed: int, *args, **kwargs) -> LazyCase:
    """``make(case_id, *args, gen=..., **kwargs)`` when the case runs, with a fresh generator each time."""

    def build():
        return make(case_id, *args, gen=make_generator(seed), **kwargs)

    return LazyCase(case_id, build)


# The anchor shapes: PLE decode R = 256, C = 10240, K = 4, D = 3; PLE prefill L = 8192; causal conv
# B·L = 8192, C = 10240, K = 4 with SiLU.
PLE_C, PLE_K, PLE_D, PLE_SQL = 10240, 4, 3, 4
DECODE_R = (1, 8, 64, 256, 1024)
PREFILL_L = ((1024,), (4096,), (8192,), (1024,) * 8)
SPEC_R = (8, 64, 256)


def _short_conv_grid(device, dtype, only=None):
    kw = {"C": PLE_C, "K": PLE_K, "D": PLE_D, "dtype": dtype, "device": device}
    specs = [(f"decode-R{R}-{lay}", "decode", (), {"decodes": R, "slots": R + 1, "layout": lay})
             for R in DECODE_R for lay in LAYOUTS]  # fmt: skip
    specs += [(f"prefill-L{sum(ls)}x{len(ls)}", "prefill", ls, {"slots": len(ls) + 1}) for ls in PREFILL_L]
    specs += [(f"spec-R{R}-SQL{PLE_SQL}", "spec", (PLE_SQL,) * R, {"accepted": (2,) * R, "sql": PLE_SQL,
               "slots": R + 1}) for R in SPEC_R]  # fmt: skip
    for seed, (case_id, mode, lengths, extra) in enumerate(specs):
        if only is None or case_id in only:
            yield _lazy(case_id, short_conv_case, seed, mode, lengths, **kw, **extra)


CAUSAL_SHAPES = ((1, 8192), (8, 1024), (64, 128), (4, 8192), (16, 4096))  # (B, L): T·C from 2^23 to 2^29
# stateless prefill at 4096 channels as well, where launches and tails weigh most: (B, L), T·C from 2^21 to 2^25
SMALL_C, SMALL_SHAPES = 4096, ((1, 512), (64, 128), (8, 1024))


def _causal_grid(device, dtype, only=None):
    for seed, (B, L) in enumerate(CAUSAL_SHAPES):
        case_id = f"B{B}-L{L}-C{PLE_C}-K4"
        if only is None or case_id in only:
            yield _lazy(case_id, causal_case, seed, (L,) * B, C=PLE_C, K=4, D=1, dtype=dtype, device=device,
                        init=True)  # fmt: skip


def _update_grid(device, dtype, only=None):
    """The slot-cache decode at B = 1-1024, and the same batches with FLA's state of the last K inputs
    (``-lastK``, the cases its update is timed on)."""
    for seed, B in enumerate((1, 8, 64, 256, 1024)):
        case_id = f"B{B}-C{PLE_C}-K4"
        if only is None or case_id in only:
            yield _lazy(case_id, update_case, seed, B, None, C=PLE_C, K=4, D=1, dtype=dtype, device=device)
    for seed, B in enumerate((1, 8, 64, 256, 1024)):
        case_id = f"B{B}-C{PLE_C}-K4-lastK"
        if only is None or case_id in only:
            yield _lazy(case_id, last_k_update_case, seed, B, C=PLE_C, K=4, dtype=dtype, device=device)


def _fn_grid(device, dtype, only=None, *, grad: bool = False):
    """The causal prefill shapes at ``PLE_C`` channels and, forward only, the small ones at ``SMALL_C``."""
    shapes = [(B, L, PLE_C) for B, L in CAUSAL_SHAPES] + ([] if grad else [(B, L, SMALL_C) for B, L in SMALL_SHAPES])
    for seed, (B, L, C) in enumerate(shapes):
        case_id = f"B{B}-L{L}-C{C}-K4"
        if only is None or case_id in only:
            yield _lazy(case_id, fn_case, seed, (L,) * B, C=C, K=4, D=1, dtype=dtype, device=device, grad=grad)


_short_conv.grid("default")(_short_conv_grid)
_short_conv.grid("quick")(lambda d, t: _short_conv_grid(d, t, ("decode-R256-cw", "prefill-L8192x1", "spec-R64-SQL4")))
_causal_conv1d.grid("default")(_causal_grid)
_causal_conv1d.grid("quick")(lambda d, t: _causal_grid(d, t, ("B8-L1024-C10240-K4",)))
_causal_conv1d_update.grid("default")(_update_grid)
_causal_conv1d_update.grid("quick")(lambda d, t: _update_grid(d, t, ("B256-C10240-K4",)))
_causal_conv1d_fn.grid("default")(_fn_grid)
_causal_conv1d_fn.grid("quick")(lambda d, t: _fn_grid(d, t, ("B8-L1024-C10240-K4",)))
causal_conv1d_fn_backward.grid("default")(lambda d, t: _fn_grid(d, t, grad=True))
causal_conv1d_fn_backward.grid("quick")(lambda d, t: _fn_grid(d, t, ("B8-L1024-C10240-K4",), grad=True))


# ------------------------------------------------------------------- cost
def conv_bytes(call: calls.ConvCall) -> int:
    """The minimum bytes of a call (:class:`~exactfuse.ops.conv.calls.ConvCall`, read by ``calls.short_conv_call``
    and its siblings): each logical row of x read once and its output written once (``short_conv``: the
    residual read and written, the outer residual read); every request's history read and its new window
    written; the weights and bias."""
    x, weight, state = call.x, call.weight, call.conv_state
    L = call.token_indices.shape[0] if call.token_indices is not None else x.shape[0]
    row_passes = 2 if call.residual is None else 3 + (call.outer_residual is not None)
    nbytes = L * x.shape[1] * x.element_size() * row_passes + weight.numel() * weight.element_size()
    if call.bias is not None:
        nbytes += call.bias.numel() * call.bias.element_size()
    if state is not None:
        mode, SL = call.mode, (weight.shape[1] - 1) * call.dilation
        R = L if mode == "decode" else call.query_start_loc.shape[0] - 1  # state_indices may be longer
        write = SL + (call.spec_query_len - 1 if mode == "spec" else 0)
        nbytes += R * state.shape[1] * (SL + write) * state.element_size()
    return nbytes


_short_conv.cost(bytes=lambda *args, **kwargs: conv_bytes(calls.short_conv_call(*args, **kwargs)))
_causal_conv1d.cost(bytes=lambda *args, **kwargs: conv_bytes(calls.causal_conv1d_call(*args, **kwargs)))
_causal_conv1d_update.cost(bytes=lambda *args, **kwargs: conv_bytes(calls.causal_conv1d_update_call(*args, **kwargs)))


def _fn_bytes(x, weight, bias=None, activation="silu", dilation=1, query_start_loc=None, seq_idx=None,
              initial_states=None) -> int:  # fmt: skip
    """``causal_conv1d``'s bytes without a state, and the initial states read once."""
    call = calls.causal_conv1d_call(x, weight, bias, activation, dilation, None, query_start_loc, seq_idx=seq_idx)
    states = initial_states.numel() * initial_states.element_size() if initial_states is not None else 0
    return conv_bytes(call) + states


_causal_conv1d_fn.cost(bytes=_fn_bytes)


def _fn_backward_bytes(grad, x, weight, bias=None, *args, **kwargs) -> int:
    """The output's gradient and x read, dx written once; the weight and bias read and their gradients
    written."""
    params = sum(t.numel() * t.element_size() for t in (weight, bias) if t is not None)
    return 3 * x.numel() * x.element_size() + 2 * params


causal_conv1d_fn_backward.cost(bytes=_fn_backward_bytes)

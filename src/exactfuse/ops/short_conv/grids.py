"""Benchmark grids and roofline cost of the conv family. Cases are lazy (``registry.LazyCase``, up to
1.3 GiB each), each drawn from a generator seeded by its place in the grid."""

from __future__ import annotations

from exactfuse.ops.short_conv import _causal_conv1d, _causal_conv1d_update, _short_conv
from exactfuse.ops.short_conv.inputs import LAYOUTS, causal_case, short_conv_case, update_case
from exactfuse.registry import LazyCase
from exactfuse.testing.inputs import make_generator


def _lazy(case_id: str, make, seed: int, *args, **kwargs) -> LazyCase:
    """``make(case_id, *args, gen=..., **kwargs)`` when the case runs, with a fresh generator each time."""

    def build():
        return make(case_id, *args, gen=make_generator(seed), **kwargs)

    return LazyCase(case_id, build)


# ------------------------------------------------------------- bench grids
# The anchors: PLE decode R = 256, C = 10240, K = 4, D = 3; PLE prefill L = 8192; causal conv
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


def _causal_grid(device, dtype, only=None):
    for seed, (B, L) in enumerate(CAUSAL_SHAPES):
        case_id = f"B{B}-L{L}-C{PLE_C}-K4"
        if only is None or case_id in only:
            yield _lazy(case_id, causal_case, seed, (L,) * B, C=PLE_C, K=4, D=1, dtype=dtype, device=device,
                        init=True)  # fmt: skip


def _update_grid(device, dtype, only=None):
    for seed, B in enumerate((1, 8, 64, 256, 1024)):
        case_id = f"B{B}-C{PLE_C}-K4"
        if only is None or case_id in only:
            yield _lazy(case_id, update_case, seed, B, None, C=PLE_C, K=4, D=1, dtype=dtype, device=device)


_short_conv.grid("default")(_short_conv_grid)
_short_conv.grid("quick")(lambda d, t: _short_conv_grid(d, t, ("decode-R256-cw", "prefill-L8192x1", "spec-R64-SQL4")))
_causal_conv1d.grid("default")(_causal_grid)
_causal_conv1d.grid("quick")(lambda d, t: _causal_grid(d, t, ("B8-L1024-C10240-K4",)))
_causal_conv1d_update.grid("default")(_update_grid)
_causal_conv1d_update.grid("quick")(lambda d, t: _update_grid(d, t, ("B256-C10240-K4",)))


# ------------------------------------------------------------------- cost
def _state_bytes(conv_state, R: int, K: int, dilation: int, write: int) -> int:
    """``R`` windows of ``SL`` positions read and ``write`` positions written, over ``C`` channels."""
    if conv_state is None:
        return 0
    C = conv_state.shape[1]
    return R * C * ((K - 1) * dilation + write) * conv_state.element_size()


def _short_conv_bytes(x, residual, conv_state, weight, state_indices, conv_mode, dilation=1, query_start_loc=None,
                      num_accepted_tokens=None, has_initial_state=None, spec_query_len=1, token_indices=None,
                      outer_residual=None) -> int:  # fmt: skip
    """Rows of x and outer_residual read, residual read and written, each once; every request's
    history read and its new window written; the weights."""
    L = token_indices.shape[0] if token_indices is not None else x.shape[0]
    row = x.shape[1] * x.element_size()
    rows = L * row * (3 + (outer_residual is not None))
    SL = (weight.shape[1] - 1) * dilation
    R = L if conv_mode == "decode" else query_start_loc.shape[0] - 1  # state_indices may be longer
    write = SL + (spec_query_len - 1 if conv_mode == "spec" else 0)
    return rows + _state_bytes(conv_state, R, weight.shape[1], dilation, write) + weight.numel() * weight.element_size()


def _causal_bytes(x, weight, bias=None, activation="silu", dilation=1, conv_state=None, query_start_loc=None,
                  state_indices=None, has_initial_state=None, pad_slot_id=-1) -> int:  # fmt: skip
    """x read and the output written once; each sequence's state read and written; weights, bias."""
    R = query_start_loc.shape[0] - 1 if query_start_loc is not None else 1
    SL = (weight.shape[1] - 1) * dilation
    params = weight.numel() * weight.element_size() + (0 if bias is None else bias.numel() * bias.element_size())
    return 2 * x.numel() * x.element_size() + _state_bytes(conv_state, R, weight.shape[1], dilation, SL) + params


def _update_bytes(x, conv_state, weight, bias=None, activation="silu", dilation=1, state_indices=None,
                  num_accepted_tokens=None, pad_slot_id=-1, history_at="start") -> int:  # fmt: skip
    B = x.shape[0]
    Lq = 1 if x.dim() == 2 else x.shape[1]
    SL = (weight.shape[1] - 1) * dilation
    write = SL + (Lq - 1 if num_accepted_tokens is not None else 0)
    params = weight.numel() * weight.element_size() + (0 if bias is None else bias.numel() * bias.element_size())
    return 2 * x.numel() * x.element_size() + _state_bytes(conv_state, B, weight.shape[1], dilation, write) + params


_short_conv.cost(bytes=_short_conv_bytes)
_causal_conv1d.cost(bytes=_causal_bytes)
_causal_conv1d_update.cost(bytes=_update_bytes)

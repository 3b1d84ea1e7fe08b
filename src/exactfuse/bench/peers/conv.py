"""FLA's varlen causal conv (``fla.modules.causal_conv1d``, Triton), timed beside ``causal_conv1d``; its decode
step beside ``causal_conv1d_update`` (the grid's cases with FLA's state of the last ``K`` inputs); beside
``causal_conv1d_fn_backward`` its backward and eager autograd's of the forward spec.

FLA keeps a conv state per sequence ``[N, C, K]`` (the last ``K`` inputs) and returns a new one; the
op keeps a slot cache ``conv_state[slots, C, W]`` read and written in place at ``state_indices``. The
adapter does what a server using FLA with a slot cache does each call: gather the histories (zeros
where ``has_initial_state`` is False), run FLA, scatter the final states back. Those two copies are
timed with FLA; the chunk indices FLA derives from ``cu_seqlens`` are built once, outside the timing.
"""

from __future__ import annotations

import functools

import torch

from exactfuse.bench.peers import (
    PeerAdapter,
    PreparedCall,
    cuda_only,
    fastest,
    importable_on_cuda,
    on_capture_stream,
    register_peer,
)

_FLA_CHUNK = 64  # causal_conv1d_fwd's default chunk of tokens, for which the chunk indices are built


def _arguments(name: str, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name, defaults filled in, read through the signature of the op ``conv.<name>``."""
    from exactfuse.ops import conv

    bound = getattr(conv, name).signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _fla_accepts(*args, **kwargs) -> bool | str:
    a = _arguments("_causal_conv1d", args, kwargs)
    if a["dilation"] != 1:
        return "FLA's causal conv has no dilation"
    if a["history_at"] != "start":
        return "the peer's adapter reads the slot cache's history at the window's start"
    if a["state_indices"] is not None and bool((a["state_indices"] == a["pad_slot_id"]).any()):
        return "FLA's causal conv has no padded requests"
    return True


def _fla_forms(x, weight, bias, activation, qsl, final_state=False) -> dict:
    """FLA's own forms of one varlen prefill over ``x [T, C]``, each ``form(initial_state) -> (y [T, C], final
    state)``: ``varlen`` (``x[None]`` with ``cu_seqlens`` and the chunk indices FLA derives from them, built
    here, outside the timed region, as a server builds them once per batch) and, where every sequence has
    one length, ``batch`` (``x`` as ``[B, L, C]``). ``initial_state``: FLA's ``[N, C, K]`` histories or None;
    ``final_state``: whether FLA returns the final ones (``output_final_state``)."""
    from fla.modules.causal_conv1d import causal_conv1d
    from fla.ops.utils.index import prepare_chunk_indices

    T, C = x.shape
    cu = (qsl if qsl is not None else torch.tensor([0, T], device=x.device)).long()
    chunks = prepare_chunk_indices(cu, _FLA_CHUNK)
    common = {"output_final_state": final_state, "activation": activation}

    def varlen(initial_state):
        y, final = causal_conv1d(x[None], weight, bias, initial_state=initial_state, cu_seqlens=cu,
                                 chunk_indices=chunks, **common)  # fmt: skip
        return y[0], final

    forms = {"varlen": varlen}
    lengths = cu.diff().unique().tolist()
    if len(lengths) == 1 and lengths[0] > 0:
        B, L = cu.shape[0] - 1, lengths[0]

        def batch(initial_state):
            # the view is taken in the call, in its grad mode: one made here, outside the backward peer's
            # enable_grad, would not carry x's gradient (a no-grad view of a leaf is not in the graph)
            y, final = causal_conv1d(x.view(B, L, C), weight, bias, initial_state=initial_state, **common)
            return y.view(T, C), final

        forms["batch"] = batch
    return forms


def _fastest_form(forms: dict, initial_state) -> str:
    """The name of the fastest of ``forms`` on this case (``peers.fastest``)."""
    return fastest({name: functools.partial(form, initial_state) for name, form in forms.items()}).form


def _histories(a: dict):
    """FLA's ``[N, C, K]`` initial states from the op's slot cache (each request's ``K - 1`` past inputs, zeros
    where ``has_initial_state`` is False, after a zero column) and the requests' slots; ``(None, None)``
    without a state or initial flags."""
    state, K = a["conv_state"], a["weight"].shape[1]
    if state is None or a["has_initial_state"] is None:
        return None, None
    R = a["query_start_loc"].shape[0] - 1 if a["query_start_loc"] is not None else 1
    slots = a["state_indices"].long() if a["state_indices"] is not None else torch.arange(R, device=state.device)
    past = torch.where(a["has_initial_state"][:R, None, None], state[slots, :, : K - 1], 0)
    return torch.cat([past.new_zeros(R, past.shape[1], 1), past], dim=2), slots


def _fla_causal_conv1d(args: tuple, kwargs: dict) -> PreparedCall:
    """FLA over the op's slot cache: the histories gathered from it, FLA's fastest form, the final states
    scattered back; the gather and the scatter are timed with FLA (a server keeping a slot cache does both)."""
    a = _arguments("_causal_conv1d", args, kwargs)
    state, K = a["conv_state"], a["weight"].shape[1]
    forms = _fla_forms(a["x"], a["weight"], a["bias"], a["activation"], a["query_start_loc"], state is not None)
    histories, slots = _histories(a)
    name = _fastest_form(forms, histories)

    def run():
        history = _histories(a)[0] if histories is not None else None
        y, final = forms[name](history)
        if state is not None:
            state[slots, :, : K - 1] = final[:, :, 1:]
        return y

    run.form = name
    return run


def _fla_plain(args: tuple, kwargs: dict) -> PreparedCall:
    """FLA's own call for the case, its fastest form: its ``[N, C, K]`` initial states (built from the case's
    slot cache outside the timed region) in, the final states out; no slot cache read or written."""
    a = _arguments("_causal_conv1d", args, kwargs)
    forms = _fla_forms(a["x"], a["weight"], a["bias"], a["activation"], a["query_start_loc"],
                       a["conv_state"] is not None)  # fmt: skip
    histories, _ = _histories(a)
    name = _fastest_form(forms, histories)

    def run():
        return forms[name](histories)[0]

    run.form = name
    return run


_FLA = importable_on_cuda("fla.modules.causal_conv1d")
register_peer(
    PeerAdapter(
        "fla", "causal_conv1d", _FLA, _fla_causal_conv1d, accepts=_fla_accepts, distribution="fla-core",
        computes="FLA with the op's slot cache: histories gathered, final states scattered back (timed)",
    )
)  # fmt: skip
register_peer(
    PeerAdapter(
        "fla-plain", "causal_conv1d", _FLA, _fla_plain, accepts=_fla_accepts, distribution="fla-core",
        computes="FLA's own call: its [N, C, K] initial states in, final states returned; no slot cache",
        result_only=True,
    )
)  # fmt: skip


def _fla_fn_forward_accepts(*args, **kwargs) -> bool | str:
    a = _arguments("_causal_conv1d_fn", args, kwargs)
    if a["dilation"] != 1:
        return "FLA's causal conv has no dilation"
    if a["seq_idx"] is not None:
        return "FLA's causal conv has no seq_idx"
    if a["initial_states"] is not None:
        return "FLA's initial states are whole windows of K positions, the op's the K - 1 past inputs"
    return True


def _fla_causal_conv1d_fn(args: tuple, kwargs: dict) -> PreparedCall:
    """FLA's own stateless varlen conv, its fastest form (no initial or final states: the op's semantics)."""
    a = _arguments("_causal_conv1d_fn", args, kwargs)
    forms = _fla_forms(a["x"], a["weight"], a["bias"], a["activation"], a["query_start_loc"])
    name = _fastest_form(forms, None)

    def run():
        return forms[name](None)[0]

    run.form = name
    return run


register_peer(
    PeerAdapter(
        "fla", "causal_conv1d_fn", _FLA, _fla_causal_conv1d_fn, accepts=_fla_fn_forward_accepts,
        distribution="fla-core",
    )
)  # fmt: skip


def _fla_update_accepts(*args, **kwargs) -> bool | str:
    """FLA's decode step keeps each request's last ``K`` inputs in row ``r`` of ``cache [B, C, K]``: the
    op's calls with that state (``history_at="end"``, ``K`` columns, no state indices), one row each."""
    a = _arguments("_causal_conv1d_update", args, kwargs)
    K = a["weight"].shape[1]
    if a["history_at"] != "end" or a["conv_state"].shape[2] != K or a["state_indices"] is not None:
        return "FLA's update keeps row r's last K inputs ([B, C, K], history_at='end', no state_indices)"
    if a["x"].dim() != 2 or a["dilation"] != 1 or a["num_accepted_tokens"] is not None:
        return "FLA's update takes one row a request, without dilation or speculative tokens"
    if a["conv_state"].shape[0] != a["x"].shape[0] or not a["conv_state"].is_contiguous():
        return "FLA's update reads a contiguous cache of one row a request"
    return True


# FLA's update kernel configuration, the fastest for each call shape (see _fla_update_config)
_FLA_UPDATE_CONFIGS: dict[tuple, object] = {}


def _fla_update_tuner():
    """The autotuner of FLA's update kernel (under its ``@triton.heuristics`` wrapper)."""
    from fla.modules.causal_conv1d.ops import causal_conv1d_update_kernel

    return getattr(causal_conv1d_update_kernel, "fn", causal_conv1d_update_kernel)


def _fla_update_config(a: dict, run):
    """The fastest of the configurations FLA's update kernel autotunes over, for this call's shape, each
    timed alone as the bench times (replays of a CUDA graph of ``run()`` on the call's own tensors, its cache
    restored once after). ``do_bench`` from Python counts the launch's host time, which at small batches
    exceeds the kernel's, so it need not rank the kernels: a bench run choosing with it measured FLA at 19.3
    and 14.0 µs at B = 8 and 64, where the run before (FLA's own pick) measured 1.84 and 5.28 µs.

    FLA's own autotuner times every configuration together with a clone and a copy-back of the whole
    cache (``restore_value=["cache"]`` runs inside Triton's timed call), each moving as many bytes as the
    kernel reads and writes of it, and keys on the channels and taps but not the batch: its pick is noise
    (one run chose a configuration 7x slower at B = 1024 in fp16 than the one it chose in bf16). Timing the
    kernel alone gives FLA the configuration its tuning is meant to find."""
    from exactfuse.bench.timing import cudagraph_timer

    x, state, weight = a["x"], a["conv_state"], a["weight"]
    key = (tuple(x.shape), x.dtype, tuple(state.shape), state.dtype, weight.dtype, a["bias"] is None, a["activation"])
    if key not in _FLA_UPDATE_CONFIGS:
        tuner, saved = _fla_update_tuner(), state.clone()
        configs, times = tuner.configs, {}
        try:
            for config in configs:
                tuner.configs = [config]  # one configuration: the autotuner runs it and times nothing
                times[config] = cudagraph_timer(rep_ms=5.0)(run)
        finally:
            tuner.configs = configs
            state.copy_(saved)
        _FLA_UPDATE_CONFIGS[key] = min(times, key=times.get)
    return _FLA_UPDATE_CONFIGS[key]


def _fla_causal_conv1d_update(args: tuple, kwargs: dict) -> PreparedCall:
    """FLA's ``causal_conv1d_update`` on the op's own cache (the same semantics: shift in the row, the conv
    over the last ``K`` inputs, the cache updated in place), at the configuration of its autotuner's set
    that is fastest for the shape (:func:`_fla_update_config`)."""
    from fla.modules.causal_conv1d import causal_conv1d_update

    a = _arguments("_causal_conv1d_update", args, kwargs)

    def run():
        # FLA returns (y, cache); the cache is the op's argument, which the gate reads as the mutated output
        return causal_conv1d_update(a["x"], a["conv_state"], weight=a["weight"], bias=a["bias"],
                                    activation=a["activation"])[0]  # fmt: skip

    best, tuner = _fla_update_config(a, run), _fla_update_tuner()

    def call():
        configs, tuner.configs = tuner.configs, [best]
        try:
            return run()
        finally:
            tuner.configs = configs

    call.config = best
    return call


register_peer(
    PeerAdapter(
        "fla",
        "causal_conv1d_update",
        importable_on_cuda("fla.modules.causal_conv1d"),
        _fla_causal_conv1d_update,
        accepts=_fla_update_accepts,
        distribution="fla-core",
    )
)


def _fn_backward_inputs(args: tuple, kwargs: dict):
    """The call's arguments by name, and fresh leaves (requiring grad) of the inputs it differentiates:
    ``x``, ``weight``, and ``bias`` and ``initial_states`` where given."""
    a = _arguments("causal_conv1d_fn_backward", args, kwargs)
    names = [n for n in ("x", "weight", "bias", "initial_states") if a[n] is not None]
    leaves = {n: a[n].detach().clone().requires_grad_() for n in names}
    return a, leaves


def _as_op_grads(a: dict, leaves: dict, grads: tuple) -> tuple[torch.Tensor, ...]:
    """A peer's gradients (one per leaf) as the op returns them: ``(d x, d weight, d bias, d initial_states)``,
    an empty fp32 ``[0]`` for an input not given."""
    none = torch.empty(0, dtype=torch.float32, device=a["x"].device)
    by_name = dict(zip(leaves, grads, strict=True))
    return tuple(by_name.get(n, none) for n in ("x", "weight", "bias", "initial_states"))


def _eager_autograd_backward(args: tuple, kwargs: dict) -> PreparedCall:
    """Eager autograd's backward of the forward spec (``native.causal_conv1d_fn``); the forward and its graph
    are built outside the timed region (on the timer's capture stream), the backward pass is timed."""
    from exactfuse.ops.conv import native

    a, leaves = _fn_backward_inputs(args, kwargs)
    with torch.enable_grad(), on_capture_stream():
        out = native.causal_conv1d_fn(
            leaves["x"], leaves["weight"], leaves.get("bias"), a["activation"], a["dilation"], a["query_start_loc"],
            a["seq_idx"], leaves.get("initial_states"),
        )  # fmt: skip
    inputs = list(leaves.values())
    return lambda: _as_op_grads(a, leaves, torch.autograd.grad(out, inputs, a["grad"], retain_graph=True))


def _fla_fn_accepts(*args, **kwargs) -> bool | str:
    from exactfuse.ops.conv import causal_conv1d_fn_backward

    bound = causal_conv1d_fn_backward.signature.bind(*args, **kwargs)
    if bound.arguments.get("dilation", 1) != 1:
        return "FLA's causal conv has no dilation"
    if bound.arguments.get("seq_idx") is not None:
        return "FLA's causal conv has no seq_idx"
    if bound.arguments.get("initial_states") is not None:
        return "FLA's initial states are its [N, C, K] window, not Dao's [R, C, K - 1]"
    return True


def _fla_backward(args: tuple, kwargs: dict) -> PreparedCall:
    """FLA's backward of its varlen causal conv, in the form whose backward is fastest; each form's forward
    is recorded outside the timed region."""
    a, leaves = _fn_backward_inputs(args, kwargs)
    forms = _fla_forms(leaves["x"], leaves["weight"], leaves.get("bias"), a["activation"], a["query_start_loc"])
    inputs, backwards = list(leaves.values()), {}
    with torch.enable_grad(), on_capture_stream():
        for name, form in forms.items():
            y = form(None)[0]
            grad = functools.partial(torch.autograd.grad, y, inputs, a["grad"], retain_graph=True)
            backwards[name] = lambda grad=grad: _as_op_grads(a, leaves, grad())
    return fastest(backwards)


register_peer(PeerAdapter("eager-autograd", "causal_conv1d_fn_backward", cuda_only, _eager_autograd_backward))
register_peer(
    PeerAdapter(
        "fla",
        "causal_conv1d_fn_backward",
        importable_on_cuda("fla.modules.causal_conv1d"),
        _fla_backward,
        accepts=_fla_fn_accepts,
        distribution="fla-core",
    )
)

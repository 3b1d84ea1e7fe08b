"""exactfuse's conv kernels for Hugging Face's hub-kernel mechanism (``kernels``: ``use_kernel_mapping`` +
``kernelize``).

transformers wraps each model's ``causal_conv1d_fn`` and ``causal_conv1d_update`` (Mamba, Mamba2, Jamba,
Bamba, LFM2, Qwen3-Next and the other conv mixers) with ``use_kernel_func_from_hub_with_fallback``, so
``kernelize`` can replace them by a layer of a kernel repository. :func:`kernel_mapping` maps both names
to the layers below, in the local repository ``hub_kernel/`` shipped inside this package::

    from kernels import Mode, kernelize, use_kernel_mapping
    from exactfuse.integrations.hub import kernel_mapping

    with use_kernel_mapping(kernel_mapping()):
        model = kernelize(model, mode=Mode.INFERENCE, device="cuda")

Each layer computes what transformers' PyTorch function computes, as exactfuse's ``causal_conv1d`` /
``causal_conv1d_update`` (conv summed in fp32 over taps in ascending order, one rounding, the SiLU and
a second rounding), and leaves ``conv_state`` as the PyTorch function does, bit for bit. Where eager
``F.conv1d`` equals the ascending tap sum (cuDNN on the H200: docs/short_conv.md), the outputs are the
PyTorch path's bits too.
"""

from __future__ import annotations

import importlib.metadata
import os
from pathlib import Path

import torch
from torch import nn

import exactfuse

REPOSITORY = Path(__file__).parent / "hub_kernel"
LAYERS = {"causal_conv1d_fn": "CausalConv1dFn", "causal_conv1d_update": "CausalConv1dUpdate"}
_ACTIVATIONS = {None: None, "silu": "silu", "swish": "silu"}  # transformers' ACT2FN names for SiLU


def kernel_mapping(device: str = "cuda") -> dict:
    """``{name: {device: LocalLayerRepository}}`` for ``kernels.use_kernel_mapping``: transformers'
    ``causal_conv1d_fn`` and ``causal_conv1d_update`` to :class:`CausalConv1dFn` and
    :class:`CausalConv1dUpdate`. Needs the ``kernels`` package (``pip install 'exactfuse[hub]'``)."""
    try:
        from kernels import LocalLayerRepository
    except ImportError as e:
        raise ImportError("kernel_mapping needs the `kernels` package: pip install 'exactfuse[hub]'") from e
    _check_transformers_takes_kernels()
    return {
        name: {device: LocalLayerRepository(repo_path=REPOSITORY, layer_name=layer)} for name, layer in LAYERS.items()
    }


def _check_transformers_takes_kernels() -> None:
    """transformers wraps its functions for ``kernelize`` only with a ``kernels`` release in the range it
    pins, and not under ``USE_HUB_KERNELS=0``; otherwise a mapping would replace nothing, silently."""
    from transformers.utils import import_utils

    if os.environ.get("USE_HUB_KERNELS", "YES").upper() not in import_utils.ENV_VARS_TRUE_VALUES:
        raise RuntimeError("kernel_mapping: USE_HUB_KERNELS is off, so transformers wraps no function for kernelize")
    if not import_utils.is_kernels_available():
        low, high = import_utils.KERNELS_MIN_VERSION, import_utils.KERNELS_MAX_VERSION
        raise RuntimeError(
            f"kernel_mapping: transformers {importlib.metadata.version('transformers')} takes kernels >= {low}, "
            f"< {high}; kernels {importlib.metadata.version('kernels')} is installed, so transformers wraps no "
            "function for kernelize"
        )


def _activation(activation) -> str | None:
    if activation not in _ACTIVATIONS:
        raise ValueError(f"activation must be None, 'silu' or 'swish' (the conv's SiLU), got {activation!r}")
    return _ACTIVATIONS[activation]


class CausalConv1dFn(nn.Module):
    """``causal_conv1d_fn(hidden_states [B, C, L], weight [C, K], bias [C] | None, activation, seq_idx)`` ->
    ``[B, C, L]``: each of the ``B`` rows one sequence with no history, as exactfuse's ``causal_conv1d`` over
    the channel-last view (no copy when the channels are the unit stride, as a projection's output is);
    ``seq_idx [B, L]`` int32 (packed sequences) splits each row further, flattened to ``[B·L]``;
    ``initial_states [B, C, K - 1]`` (Dao's) are each row's history; ``return_final_states`` returns
    ``(out, final_states [B, C, K - 1])``, the last inputs of each row (into ``final_states_out`` when given).
    The call has a backward (``causal_conv1d_fn``: x, weight, bias and initial states; the final states'
    gradient through torch ops), so the layer serves training too."""

    can_torch_compile = True
    has_backward = True

    def forward(self, hidden_states, weight, bias=None, activation=None, **kwargs):
        seq_idx = kwargs.get("seq_idx")  # a keyword: kernels takes only the replaced function's signature
        initial_states = kwargs.get("initial_states")  # [B, C, K - 1], Dao's
        return_final_states = bool(kwargs.get("return_final_states", False))
        final_states_out = kwargs.get("final_states_out")  # [B, C, K - 1], written in place
        if final_states_out is not None and not return_final_states:
            raise ValueError("causal_conv1d_fn: final_states_out is written only with return_final_states=True")
        B, C, L = hidden_states.shape
        x = hidden_states.to(weight.dtype).transpose(1, 2).reshape(B * L, C)
        # one row is one sequence, whose start table the op makes itself (calls.one_sequence); rows of a batch need one
        starts = None if B == 1 else torch.arange(0, B * L + 1, L, dtype=torch.int32, device=x.device)
        if seq_idx is not None:
            if tuple(seq_idx.shape) != (B, L):
                raise ValueError(f"causal_conv1d_fn: seq_idx must be [B, L] = [{B}, {L}], got {list(seq_idx.shape)}")
            seq_idx = seq_idx.reshape(B * L)
        if initial_states is not None and starts is None:
            starts = torch.tensor([0, L], dtype=torch.int32, device=x.device)
        out = exactfuse.causal_conv1d(
            x, weight, bias, activation=_activation(activation), query_start_loc=starts, seq_idx=seq_idx,
            initial_states=None if initial_states is None else initial_states.to(x.dtype),
            return_final_states=return_final_states,
        )  # fmt: skip
        if return_final_states:  # Dao's: the last K - 1 inputs of each row, in the input's dtype
            out, final = out
            final = final.to(hidden_states.dtype)
            if final_states_out is not None:
                final = final_states_out.copy_(final)
        out = out.view(B, L, C).transpose(1, 2).to(hidden_states.dtype)
        return (out, final) if return_final_states else out


class CausalConv1dUpdate(nn.Module):
    """``causal_conv1d_update(hidden_states [B, C, L], conv_state [B, C, W], weight [C, K], bias, activation)``
    -> ``[B, C, L]``, with ``W >= K - 1``: the conv over the last ``K - 1`` state columns and the ``L`` new
    inputs; ``conv_state`` becomes the last ``W`` columns of ``conv_state ‖ hidden_states``, as the
    PyTorch function leaves it: exactfuse's ``causal_conv1d_update`` with ``history_at="end"`` (Dao's
    wide-state convention)."""

    can_torch_compile = True
    has_backward = False

    def forward(self, hidden_states, conv_state, weight, bias=None, activation=None):
        x = hidden_states.to(conv_state.dtype)
        kw = dict(activation=_activation(activation), history_at="end")
        if hidden_states.shape[-1] == 1:
            out = exactfuse.causal_conv1d_update(x[..., 0], conv_state, weight, bias, **kw)
            return out[..., None].to(hidden_states.dtype)
        # exactfuse takes a sequence's rows adjacent (transformers calls this with L = 1 only)
        out = exactfuse.causal_conv1d_update(x.transpose(1, 2).contiguous(), conv_state, weight, bias, **kw)
        return out.transpose(1, 2).to(hidden_states.dtype)

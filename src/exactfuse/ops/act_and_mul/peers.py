"""Liger-Kernel's SwiGLU and GEGLU, timed beside silu_and_mul and gelu_and_mul by ``exactfuse bench``."""

from __future__ import annotations

import torch

from exactfuse.bench.peers import PeerAdapter, PreparedCall, importable_on_cuda, register_peer


def _split_gate_up(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x: [..., 2d]`` -> contiguous ``gate, up: [..., d]`` (Liger takes two tensors)."""
    d = x.shape[-1] // 2
    return x[..., :d].contiguous(), x[..., d:].contiguous()


def _approximate(args: tuple, kwargs: dict) -> str:
    return kwargs.get("approximate", args[1] if len(args) > 1 else "none")


def _liger_swiglu(args: tuple, kwargs: dict) -> PreparedCall:
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    gate, up = _split_gate_up(args[0])
    return lambda: LigerSiLUMulFunction.apply(gate, up)


def _liger_geglu(args: tuple, kwargs: dict) -> PreparedCall:
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    gate, up = _split_gate_up(args[0])
    return lambda: LigerGELUMulFunction.apply(gate, up)


register_peer(
    PeerAdapter(
        "liger",
        "silu_and_mul",
        importable_on_cuda("liger_kernel.ops.swiglu"),
        _liger_swiglu,
        distribution="liger-kernel",
    )
)
register_peer(
    PeerAdapter(
        "liger",
        "gelu_and_mul",
        importable_on_cuda("liger_kernel.ops.geglu"),
        _liger_geglu,
        # Liger's GEGLU implements the tanh approximation only.
        accepts=lambda *args, **kwargs: _approximate(args, kwargs) == "tanh",
        distribution="liger-kernel",
    )
)

"""Liger-Kernel's SwiGLU and GEGLU, timed beside silu_and_mul / gelu_and_mul (gate and up split out of
``x`` and made contiguous outside the timed region) and silu_mul / gelu_mul (the same two tensors) by
``exactfuse bench``."""

from __future__ import annotations

import torch

from exactfuse.bench.peers import PeerAdapter, PreparedCall, importable_on_cuda, register_peer


def _split_gate_up(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``x: [..., 2d]`` -> contiguous ``gate, up: [..., d]`` (Liger takes two tensors)."""
    d = x.shape[-1] // 2
    return x[..., :d].contiguous(), x[..., d:].contiguous()


def _gate_up(args: tuple) -> tuple[torch.Tensor, torch.Tensor]:
    """The two tensors of a call: ``(x,)`` split, or ``(gate, up)`` as they are."""
    if len(args) > 1 and isinstance(args[1], torch.Tensor):
        return args[0], args[1]
    return _split_gate_up(args[0])


def _approximate(args: tuple, kwargs: dict) -> str:
    rest = [a for a in args if isinstance(a, str)]
    return kwargs.get("approximate", rest[0] if rest else "none")


def _liger_swiglu(args: tuple, kwargs: dict) -> PreparedCall:
    from liger_kernel.ops.swiglu import LigerSiLUMulFunction

    gate, up = _gate_up(args)
    return lambda: LigerSiLUMulFunction.apply(gate, up)


def _liger_geglu(args: tuple, kwargs: dict) -> PreparedCall:
    from liger_kernel.ops.geglu import LigerGELUMulFunction

    gate, up = _gate_up(args)
    return lambda: LigerGELUMulFunction.apply(gate, up)


for name in ("silu_and_mul", "silu_mul"):
    register_peer(
        PeerAdapter(
            "liger", name, importable_on_cuda("liger_kernel.ops.swiglu"), _liger_swiglu, distribution="liger-kernel"
        )
    )
for name in ("gelu_and_mul", "gelu_mul"):
    register_peer(
        PeerAdapter(
            "liger",
            name,
            importable_on_cuda("liger_kernel.ops.geglu"),
            _liger_geglu,
            # Liger's GEGLU implements the tanh approximation only.
            accepts=lambda *args, **kwargs: _approximate(args, kwargs) == "tanh",
            distribution="liger-kernel",
        )
    )

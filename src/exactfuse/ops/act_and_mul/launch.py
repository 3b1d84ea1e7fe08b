"""The host side of the gated activations' Triton provider: the launchers (2-D row views, the tile from
``heuristics.py``, the output allocated, the kernels of ``gated_kernel.py`` launched), the provider functions with
the specs' signatures, and what the kernels take (the providers' ``supports_args``)."""

from __future__ import annotations

import torch
import triton

from exactfuse.ops.act_and_mul.gated_kernel import act_and_mul_backward_kernel, act_and_mul_kernel
from exactfuse.ops.act_and_mul.heuristics import FLAT_BLOCK, act_and_mul_config, flat_index
from exactfuse.ops.fastmath import EXACT, EXACT_FORMULAS, chosen_formula
from exactfuse.registry import platform
from exactfuse.utils import empty, is_symbolic, needs_int64

ACTIVATIONS = {a: EXACT[a] for a in ("silu", "gelu_none", "gelu_tanh")}  # activation name -> its exact formula id


def _launch(gate: torch.Tensor, up: torch.Tensor | None, D: int, out_shape, activation: str) -> torch.Tensor:
    """``act(gate) * up`` over 2-D row views with unit last stride -> a new ``out_shape`` tensor; ``up``
    None: ``gate`` is ``[T, 2D]`` and up its second half (no view made: two slices cost 3.5 µs of host
    time a call on a 2-core CPU).

    A traced call (symbolic row count) takes the configuration of ``D`` alone and int64 offsets, so one
    trace is correct for every T; eager calls choose num_warps and offsets by the sizes. The formula is
    the one proven for the dtype on this GPU (the first call per dtype and device runs the proof).
    """
    T = gate.shape[0]
    y = empty(out_shape, gate.dtype, gate.device)
    if not is_symbolic(T) and T * D == 0:
        return y
    rows = None if is_symbolic(T) else T
    BT, BD, num_warps = act_and_mul_config(D, rows)
    formula = chosen_formula(activation, gate.dtype, gate.device)
    flat = flat_index(D, rows, fast_math=formula not in EXACT_FORMULAS)
    if flat:
        BT, BD = 1, FLAT_BLOCK
    grid = (triton.cdiv(T * D, BD),) if flat else (triton.cdiv(T, BT), triton.cdiv(D, BD))
    joined = up is None
    up = gate if joined else up
    torch.library.wrap_triton(act_and_mul_kernel)[grid](
        gate,
        up,
        y,
        T,
        D,
        gate.stride(0),
        up.stride(0),
        D,
        FORMULA=formula,
        BT=BT,
        BD=BD,
        INT64_INDEX=needs_int64(T, max(gate.stride(0), up.stride(0), 2 * D if joined else D)),
        JOINED=joined,
        FLAT=flat,
        num_warps=num_warps,
    )
    return y


def launch_act_and_mul(x: torch.Tensor, activation: str) -> torch.Tensor:
    """``x: [..., 2d]`` -> ``[..., d]``: the kernel over its two halves."""
    D = x.shape[-1] // 2
    x2 = x if x.dim() == 2 else x.reshape(-1, 2 * D)
    return _launch(x2, None, D, (*x.shape[:-1], D), activation)


def launch_gate_up(gate: torch.Tensor, up: torch.Tensor, activation: str) -> torch.Tensor:
    """``gate, up: [..., d]`` -> ``[..., d]``."""
    D = gate.shape[-1]
    g2 = gate if gate.dim() == 2 else gate.reshape(-1, D)
    u2 = up if up.dim() == 2 else up.reshape(-1, D)
    return _launch(g2, u2, D, gate.shape, activation)


def silu_and_mul_triton(x: torch.Tensor) -> torch.Tensor:
    return launch_act_and_mul(x, "silu")


def gelu_and_mul_triton(x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_act_and_mul(x, "gelu_tanh" if approximate == "tanh" else "gelu_none")


def silu_mul_triton(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return launch_gate_up(gate, up, "silu")


def gelu_mul_triton(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_gate_up(gate, up, "gelu_tanh" if approximate == "tanh" else "gelu_none")


# ------------------------------------------------------------------ backward
def _launch_backward(dy, gate, up, dg, du, D: int, activation: str) -> None:
    """The gradients of ``act(gate) * up`` over 2-D row views with unit last stride into ``dg`` and ``du``
    (new contiguous tensors); ``up`` None: ``gate`` is ``x [T, 2D]``, ``dg`` is ``dx [..., 2D]`` and
    ``du`` None. The forward's launch rule (``act_and_mul_config``) on the output width ``D``; a traced call
    takes the configuration of ``D`` alone and int64 offsets, as the forward does."""
    T = gate.shape[0]
    if not is_symbolic(T) and T * D == 0:
        return
    BT, BD, num_warps = act_and_mul_config(D, None if is_symbolic(T) else T)
    joined = up is None
    up = gate if joined else up
    stride_dx = 2 * D if joined else D
    torch.library.wrap_triton(act_and_mul_backward_kernel)[(triton.cdiv(T, BT), triton.cdiv(D, BD))](
        dy,
        gate,
        up,
        dg,
        dg if joined else du,
        T,
        D,
        dy.stride(0),
        gate.stride(0),
        up.stride(0),
        stride_dx,
        FORMULA=ACTIVATIONS[activation],
        BT=BT,
        BD=BD,
        INT64_INDEX=needs_int64(T, max(dy.stride(0), gate.stride(0), up.stride(0), stride_dx)),
        JOINED=joined,
        num_warps=num_warps,
    )


def launch_act_and_mul_backward(grad: torch.Tensor, x: torch.Tensor, activation: str) -> torch.Tensor:
    """``grad: [..., d]``, ``x: [..., 2d]`` -> ``dx [..., 2d]``."""
    D = x.shape[-1] // 2
    dx = empty(x.shape, x.dtype, x.device)
    x2 = x if x.dim() == 2 else x.reshape(-1, 2 * D)
    dy2 = grad if grad.dim() == 2 else grad.reshape(-1, D)
    _launch_backward(dy2, x2, None, dx, None, D, activation)
    return dx


def launch_gate_up_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, activation: str
) -> tuple[torch.Tensor, torch.Tensor]:
    """``grad, gate, up: [..., d]`` -> ``(d gate, d up)``, each ``[..., d]``."""
    D = gate.shape[-1]
    dg, du = empty(gate.shape, gate.dtype, gate.device), empty(gate.shape, gate.dtype, gate.device)
    g2 = gate if gate.dim() == 2 else gate.reshape(-1, D)
    u2 = up if up.dim() == 2 else up.reshape(-1, D)
    dy2 = grad if grad.dim() == 2 else grad.reshape(-1, D)
    _launch_backward(dy2, g2, u2, dg, du, D, activation)
    return dg, du


def _gelu(approximate: str) -> str:
    return "gelu_tanh" if approximate == "tanh" else "gelu_none"


def silu_and_mul_backward_triton(grad: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return launch_act_and_mul_backward(grad, x, "silu")


def gelu_and_mul_backward_triton(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> torch.Tensor:
    return launch_act_and_mul_backward(grad, x, _gelu(approximate))


def silu_mul_backward_triton(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    return launch_gate_up_backward(grad, gate, up, "silu")


def gelu_mul_backward_triton(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "none"
) -> tuple[torch.Tensor, torch.Tensor]:
    return launch_gate_up_backward(grad, gate, up, _gelu(approximate))


# ------------------------------------------------------------------ what the kernel takes (supports_args)
def _reads(name: str, t: torch.Tensor) -> bool | str:
    """Rows the kernel reads: a tensor Triton can read, 2-D with unit last stride or contiguous."""
    if not t.is_cuda and (reason := platform.triton_reads(name, t)) is not True:
        return reason
    if (t.dim() == 2 and t.stride(-1) == 1) or t.is_contiguous():
        return True
    return (f"{name} has strides {tuple(t.stride())}: the kernel reads contiguous {name}, or 2-D rows with "
            "unit last stride")  # fmt: skip


def triton_supports(x: torch.Tensor, approximate: str = "none") -> bool | str:
    return _reads("x", x)


def triton_supports_gate_up(gate: torch.Tensor, up: torch.Tensor, approximate: str = "none") -> bool | str:
    reason = _reads("gate", gate)
    return _reads("up", up) if reason is True else reason


def triton_supports_backward(grad: torch.Tensor, x: torch.Tensor, approximate: str = "none") -> bool | str:
    reason = _reads("grad", grad)
    return _reads("x", x) if reason is True else reason


def triton_supports_gate_up_backward(
    grad: torch.Tensor, gate: torch.Tensor, up: torch.Tensor, approximate: str = "none"
) -> bool | str:
    reason = _reads("grad", grad)
    return triton_supports_gate_up(gate, up) if reason is True else reason

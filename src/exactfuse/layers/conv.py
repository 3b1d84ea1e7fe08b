"""Causal depthwise conv layers with a state cache: ``ShortConv`` (PLE) and ``CausalConv1d`` (Mamba)."""

from __future__ import annotations

import torch
from torch import nn

from exactfuse.ops.conv import causal_conv1d, causal_conv1d_update, short_conv

STATE_LAYOUTS = ("cw", "wc")


def allocate_conv_state(
    slots: int, C: int, width: int, dtype: torch.dtype, layout: str = "cw", device: torch.device | str | None = None
) -> torch.Tensor:
    """A zeroed state pool, logical ``[slots, C, width]``, stored as ``[slots, C, width]`` (``"cw"``) or
    ``[slots, width, C]`` (``"wc"``, returned as its transposed view), on ``device`` (default: CUDA when a
    GPU is available, else the CPU). For ``short_conv`` slot 0 is the null slot, so allocate one more than
    the requests it serves; ``width`` is ``(K-1)·dilation`` plus ``num_speculative_tokens`` when
    speculative decoding is used."""
    if layout not in STATE_LAYOUTS:
        raise ValueError(f"allocate_conv_state: layout must be 'cw' or 'wc', got {layout!r}")
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    elif torch.device(device).type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"allocate_conv_state: device is {str(device)!r}, but no CUDA GPU is available here")
    if layout == "cw":
        return torch.zeros((slots, C, width), dtype=dtype, device=device)
    return torch.zeros((slots, width, C), dtype=dtype, device=device).transpose(1, 2)


class ShortConv(nn.Module):
    """PLE short conv: ``residual = outer + (residual + silu(conv(x)))`` in place, with a state cache.

    Owns ``weight [C, K]`` and ``dilation``. ``forward(x, residual, conv_state, state_indices, *, mode,
    ...)`` takes the arguments of :func:`exactfuse.short_conv` after ``weight`` and returns ``residual``.
    Every row passed gets the outer residual; pass graph-padding rows with state index 0 (decode) or
    after ``query_start_loc[R]`` (spec, prefill), and they get ``outer + residual``.
    """

    def __init__(self, channels: int, kernel_size: int, dilation: int = 1, *, dtype=None, device=None):
        super().__init__()
        if kernel_size < 1 or dilation < 1:
            raise ValueError(f"ShortConv: kernel_size and dilation must be >= 1, got {kernel_size}, {dilation}")
        self.weight = nn.Parameter(torch.empty((channels, kernel_size), dtype=dtype, device=device))
        self.dilation = dilation
        nn.init.normal_(self.weight, std=kernel_size**-0.5)

    @property
    def state_len(self) -> int:
        return (self.weight.shape[1] - 1) * self.dilation

    def forward(self, x, residual, conv_state, state_indices, *, mode: str, **options) -> torch.Tensor:
        short_conv(x, residual, conv_state, self.weight, state_indices, mode=mode, dilation=self.dilation, **options)
        return residual

    def extra_repr(self) -> str:
        C, K = self.weight.shape
        return f"channels={C}, kernel_size={K}, dilation={self.dilation}"


class CausalConv1d(nn.Module):
    """Mamba-style causal depthwise conv (``[T, C]`` channel-last) with optional bias and SiLU.

    ``forward(x, **options)`` is :func:`exactfuse.causal_conv1d` (varlen prefill, optional state);
    ``step(x, conv_state, **options)`` is :func:`exactfuse.causal_conv1d_update` (decode).
    """

    def __init__(self, channels: int, kernel_size: int, *, bias: bool = True, activation: str | None = "silu",
                 dilation: int = 1, dtype=None, device=None):  # fmt: skip
        super().__init__()
        if activation not in (None, "silu"):
            raise ValueError(f"CausalConv1d: activation must be None or 'silu', got {activation!r}")
        self.weight = nn.Parameter(torch.empty((channels, kernel_size), dtype=dtype, device=device))
        self.bias = nn.Parameter(torch.zeros(channels, dtype=dtype, device=device)) if bias else None
        self.activation, self.dilation = activation, dilation
        nn.init.normal_(self.weight, std=kernel_size**-0.5)

    def forward(self, x: torch.Tensor, **options) -> torch.Tensor:
        return causal_conv1d(x, self.weight, self.bias, activation=self.activation, dilation=self.dilation, **options)

    def step(self, x: torch.Tensor, conv_state: torch.Tensor, **options) -> torch.Tensor:
        return causal_conv1d_update(
            x, conv_state, self.weight, self.bias, activation=self.activation, dilation=self.dilation, **options
        )

    def extra_repr(self) -> str:
        C, K = self.weight.shape
        return f"channels={C}, kernel_size={K}, bias={self.bias is not None}, activation={self.activation!r}"

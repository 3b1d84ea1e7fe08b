"""``W4A16Linear``: a linear layer with 4-bit GPTQ weights and fp16/bf16 activations."""

from __future__ import annotations

import torch
from torch import nn

from exactfuse.ops.w4a16 import dense_weight, w4a16_gemm
from exactfuse.ops.w4a16.packing import PACK, prepare_gptq, quantize_rtn


class W4A16Linear(nn.Module):
    """``y = x @ W + bias`` with ``W`` stored as 4-bit codes in the kernel's prepared layout.

    Buffers (all in ``state_dict``): ``qweight [K/8, N]`` int32, ``scales [K/G, N]``
    (the activation dtype), ``zeros [K/G, N]`` uint8 when asymmetric, ``perm [K]``
    int32 when act-order, ``bias [N]`` when present. With ``groups``, each row has its own
    group: ``group_index [K]`` int32 names its row of ``scales [groups, N]`` (and ``zeros``),
    rows stay in checkpoint order (no ``perm``) and ``group_size`` is the source's, for the
    record (a row-parallel shard of an act-order layer, ``exactfuse.distributed.shard_row``);
    such a layer dequantizes ``W`` at every M. Build one with
    :meth:`from_gptq` or :meth:`from_linear`; the constructor makes empty
    buffers of the right shapes for ``load_state_dict``. ``x`` is ``[..., K]``
    in the scales' dtype; ``.to(dtype)`` converts scales and bias only.
    ``deterministic=False`` lets split-K use atomics (results may vary run to run).
    Up to 128 rows of ``x`` run the fused kernel; more rows (prefill) dequantize
    ``W`` into a transient ``[K, N]`` buffer (``2 * K * N`` bytes from the caching
    allocator) and multiply with cuBLAS (``exactfuse.ops.w4a16.heuristics``).
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        *,
        group_size: int = 128,
        symmetric: bool = True,
        act_order: bool = False,
        bias: bool = False,
        dtype: torch.dtype = torch.float16,
        device: torch.device | str | None = None,
        source_format: str = "v1",
        deterministic: bool = True,
        groups: int | None = None,
    ):
        super().__init__()
        K, N = in_features, out_features
        if groups is None:
            G = K if group_size == -1 else group_size
            if K % PACK or G <= 0 or K % G:
                raise ValueError(
                    f"W4A16Linear: in_features = {K} must be a multiple of {PACK} and of group_size = {group_size}"
                )
            groups = K // G
            per_row = None
        else:
            if K % PACK or not (isinstance(groups, int) and groups >= 1) or act_order:
                raise ValueError(
                    f"W4A16Linear: with groups (= {groups!r}, an int >= 1), in_features = {K} must be a multiple of "
                    f"{PACK} and act_order False (rows in checkpoint order), got act_order={act_order}"
                )
            per_row = torch.zeros((K,), dtype=torch.int32, device=device)
        self.in_features, self.out_features = K, N
        self.group_size, self.symmetric, self.act_order = group_size, symmetric, act_order
        self.source_format, self.deterministic = source_format, deterministic
        self.register_buffer("qweight", torch.zeros((K // PACK, N), dtype=torch.int32, device=device))
        self.register_buffer("scales", torch.ones((groups, N), dtype=dtype, device=device))
        zeros = None if symmetric else torch.full((groups, N), 8, dtype=torch.uint8, device=device)
        self.register_buffer("zeros", zeros)
        self.register_buffer("perm", torch.arange(K, dtype=torch.int32, device=device) if act_order else None)
        self.register_buffer("bias", torch.zeros((N,), dtype=dtype, device=device) if bias else None)
        self.register_buffer("group_index", per_row)

    @classmethod
    def from_gptq(
        cls,
        qweight: torch.Tensor,
        qzeros: torch.Tensor | None,
        scales: torch.Tensor,
        g_idx: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        *,
        bits: int = 4,
        format: str = "v1",
        sym: bool | None = None,
        dtype: torch.dtype | None = None,
    ) -> W4A16Linear:
        """From GPTQ checkpoint tensors (layouts in :mod:`exactfuse.ops.w4a16.packing`).

        ``sym=None`` infers symmetry from the zero points; ``dtype`` (default:
        the scales') is the activation dtype the layer will run in.
        """
        p = prepare_gptq(qweight, qzeros, scales, g_idx, bits=bits, format=format, sym=sym)
        K, N = p.qweight.shape[0] * PACK, p.qweight.shape[1]
        dtype = dtype or scales.dtype
        layer = cls(
            K,
            N,
            group_size=p.group_size,
            symmetric=p.zeros is None,
            act_order=p.perm is not None,
            bias=bias is not None,
            dtype=dtype,
            device=qweight.device,
            source_format=format,
        )
        layer.qweight.copy_(p.qweight)
        layer.scales.copy_(p.scales.to(dtype))
        if p.zeros is not None:
            layer.zeros.copy_(p.zeros)
        if p.perm is not None:
            layer.perm.copy_(p.perm)
        if bias is not None:
            if tuple(bias.shape) != (N,):
                raise ValueError(f"W4A16Linear.from_gptq: bias must be [N] = [{N}], got {list(bias.shape)}")
            layer.bias.copy_(bias.to(dtype))
        return layer

    @classmethod
    def from_linear(cls, linear: nn.Linear, group_size: int = 128, symmetric: bool = True) -> W4A16Linear:
        """Round-to-nearest quantization of an ``nn.Linear`` (fp16/bf16 keep their dtype, else fp16)."""
        w = linear.weight.detach()
        dtype = w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16
        t = quantize_rtn(w, group_size, symmetric, format="v2", scale_dtype=dtype)
        bias = None if linear.bias is None else linear.bias.detach()
        return cls.from_gptq(t.qweight, t.qzeros, t.scales, None, bias, format="v2", sym=symmetric, dtype=dtype)

    def dense_weight(self) -> torch.Tensor:
        """The dequantized ``[K, N]`` weight in the activation dtype (for dense baselines)."""
        return dense_weight(
            self.qweight, self.scales, self.zeros, self.perm, self.group_size, group_index=self.group_index
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., K]`` -> ``[..., N]`` in ``x``'s dtype."""
        x2 = x.reshape(-1, self.in_features)
        y = w4a16_gemm(
            x2, self.qweight, self.scales, self.zeros, self.perm, self.bias, self.group_size, self.deterministic,
            self.group_index,
        )  # fmt: skip
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"format='gptq-{self.source_format}', group_size={self.group_size}, symmetric={self.symmetric}, "
            f"act_order={self.act_order}, bias={self.bias is not None}"
            + ("" if self.group_index is None else f", groups={self.scales.shape[0]} (a group per row)")
        )

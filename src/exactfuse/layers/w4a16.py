"""``W4A16Linear``: a linear layer with 4-bit GPTQ weights and fp16/bf16 activations."""

from __future__ import annotations

import torch
from torch import nn

from exactfuse.ops.w4a16 import dense_weight, fragment, heuristics, w4a16_gemm, w4a16_gemm_packed
from exactfuse.ops.w4a16.mma import fragment_kernel_runs
from exactfuse.ops.w4a16.packing import PACK, prepare_gptq, quantize_rtn

LAYOUTS = ("gptq", "fragment")
# what the constructors that are given the weights take: a layout, or "auto" (``W4A16Linear.preferred_layout``)
LAYOUT_CHOICES = ("auto", *LAYOUTS)
_GPTQ_BUFFERS = ("qweight", "scales", "zeros")


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

    ``layout="fragment"`` holds the same weight repacked once for ``w4a16_gemm_packed``
    (``exactfuse.ops.w4a16.fragment``): ``words [N/16, K/64, 32, 4]`` int32,
    ``fragment_scales [K/G, N]`` (the activation dtype) and, when asymmetric,
    ``fragment_zeros [K/G, N/8]`` int32 (8 zero points a word) in place of ``qweight``,
    ``scales`` and ``zeros``, run by a warp-specialized stream-K kernel up to 128 rows
    (docs/heuristics.md) and dequantized for cuBLAS above. Its ``state_dict`` is still the GPTQ
    layout's (unpacked on save, repacked on load: exact inverses), so checkpoints do not
    depend on the layout; ``.to(dtype)`` converts the scales as the GPTQ layout does. It
    needs groups of a multiple of 64 rows (or one group), ``K % 64 == N % 16 == 0``, zero
    points 0..15 (not a GPTQ v1 zero point of 16), no per-row ``groups``, and its kernel
    runs on sm_90 (elsewhere the op's native path). ``deterministic`` does not apply: a unit
    cut between CTAs is always summed in a fixed order.
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
        layout: str = "gptq",
    ):
        super().__init__()
        K, N = in_features, out_features
        if layout not in LAYOUTS:
            raise ValueError(f"W4A16Linear: layout must be one of {LAYOUTS}, got {layout!r}")
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
        self.layout = "gptq"
        if layout == "fragment":
            self.repack()

    def fragment_unsupported(self) -> str | None:
        """Why this layer has no fragment layout (None: it has)."""
        if self.group_index is not None:
            return "it has no per-row groups (groups=...)"
        groups = (self.scales if self.layout == "gptq" else self.fragment_scales).shape[0]
        if reason := fragment.layout_unsupported(self.in_features, self.out_features, groups):
            return reason
        if self.layout == "gptq" and self.zeros is not None and bool((self.zeros > 15).any()):
            return "its zero points must be 0..15 (a nibble; GPTQ v1 can give 16)"
        return None

    def preferred_layout(self) -> str:
        """The layout ``layout="auto"`` takes: ``"fragment"`` where the layer has one (:meth:`fragment_unsupported`),
        holds at least ``heuristics.FRAGMENT_LAYOUT_MIN_WEIGHTS`` weights (on smaller layers its kernel is the
        slower one at decode sizes) and its kernel runs on the layer's device (an sm_90 GPU with Gluon), else
        ``"gptq"`` (elsewhere the fragment layout's op would run the spec). Not the default: docs/performance.md,
        "W4A16Linear's layout"."""
        small = self.in_features * self.out_features < heuristics.FRAGMENT_LAYOUT_MIN_WEIGHTS
        if small or self.fragment_unsupported() is not None:
            return "gptq"
        device = (self.qweight if self.layout == "gptq" else self.words).device
        return "fragment" if fragment_kernel_runs(device) else "gptq"

    def repack(self) -> W4A16Linear:
        """Hold the weight in the fragment layout from now on (class docstring); returns ``self``."""
        if self.layout == "fragment":
            return self
        if reason := self.fragment_unsupported():
            raise ValueError(f"W4A16Linear: layout='fragment' does not take this layer: {reason}")
        packed = fragment.pack(self.qweight, self.scales, self.zeros)
        zeros = self._zero_words(self.zeros)
        for name in _GPTQ_BUFFERS:
            delattr(self, name)
        # not in state_dict: _save_to_state_dict writes the GPTQ tensors they unpack to
        self.register_buffer("words", packed.words, persistent=False)
        self.register_buffer("fragment_scales", packed.scales, persistent=False)
        self.register_buffer("fragment_zeros", zeros, persistent=False)
        self.layout = "fragment"
        return self

    def _zero_words(self, zeros: torch.Tensor | None) -> torch.Tensor | None:
        """The fragment layout's zero words of ``zeros [K/G, N]``: a tensor whenever the layer is asymmetric
        (all 8 included), so that a load copies into it."""
        return None if self.symmetric else fragment.pack_zeros(zeros)

    def unpacked(self) -> W4A16Linear:
        """The same layer in the GPTQ layout: ``self`` if it is, else a new one built from this one's ``state_dict``."""
        if self.layout == "gptq":
            return self
        layer = W4A16Linear(
            self.in_features, self.out_features, group_size=self.group_size, symmetric=self.symmetric,
            act_order=self.act_order, bias=self.bias is not None, dtype=self.fragment_scales.dtype,
            device=self.words.device, source_format=self.source_format, deterministic=self.deterministic,
        )  # fmt: skip
        layer.load_state_dict(self.state_dict())
        return layer

    def _gptq_tensors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(qweight, scales, zeros)`` of the GPTQ layout (unpacked from the fragment layout)."""
        if self.layout == "gptq":
            return self.qweight, self.scales, self.zeros
        qweight, scales, zeros = fragment.unpack(self.words, self.fragment_scales, self.fragment_zeros)
        return qweight, scales, None if self.symmetric else zeros

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        super()._save_to_state_dict(destination, prefix, keep_vars)
        if self.layout == "fragment":
            for name, t in zip(_GPTQ_BUFFERS, self._gptq_tensors(), strict=True):
                if t is not None:
                    destination[prefix + name] = t

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):  # fmt: skip
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        if self.layout != "fragment":
            return
        groups = self.fragment_scales.shape[0]
        shapes = {"qweight": (self.in_features // PACK, self.out_features), "scales": (groups, self.out_features)}
        if not self.symmetric:
            shapes["zeros"] = shapes["scales"]
        keys = {name: prefix + name for name in shapes}
        consumed = set(keys.values())
        unexpected_keys[:] = [k for k in unexpected_keys if k not in consumed]
        missing_keys.extend(key for key in keys.values() if key not in state_dict)
        got = {name: state_dict[key] for name, key in keys.items() if key in state_dict}
        if len(got) < len(keys):
            return
        wrong = [
            f"{keys[n]}: {list(t.shape)}, expected {list(shapes[n])}" for n, t in got.items() if t.shape != shapes[n]
        ]
        if wrong:
            error_msgs.append("size mismatch for " + "; ".join(wrong))
            return
        if "zeros" in got and got["zeros"].numel() and (top := int(got["zeros"].max())) > 15:
            error_msgs.append(f"{keys['zeros']}: the fragment layout holds zero points 0..15, got up to {top}")
            return
        scales = got["scales"].to(self.fragment_scales.device, self.fragment_scales.dtype)
        zeros = got["zeros"].to(scales.device) if "zeros" in got else None
        packed = fragment.pack(got["qweight"].to(scales.device), scales, zeros)
        self.words.copy_(packed.words)
        self.fragment_scales.copy_(packed.scales)
        if zeros is not None:
            self.fragment_zeros.copy_(self._zero_words(zeros))

    def _apply(self, fn, recurse=True):
        if self.layout != "fragment":
            return super()._apply(fn, recurse)
        # the scales convert as any float buffer (the zero words stay int32), but only to a dtype the
        # kernel takes: converted first, so that a refused dtype leaves the layer as it was
        scales = fn(self.fragment_scales)
        if scales.dtype not in fragment.MAGIC:
            raise TypeError(
                f"W4A16Linear: layout='fragment' keeps its scales in float16 or bfloat16, not {scales.dtype}"
            )
        self._buffers["fragment_scales"] = None
        super()._apply(fn, recurse)
        self._buffers["fragment_scales"] = scales
        return self

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
        layout: str = "gptq",
    ) -> W4A16Linear:
        """From GPTQ checkpoint tensors (layouts in :mod:`exactfuse.ops.w4a16.packing`).

        ``sym=None`` infers symmetry from the zero points; ``dtype`` (default:
        the scales') is the activation dtype the layer will run in; ``layout``: as the constructor's, or
        ``"auto"``: :meth:`preferred_layout`, read from the weights on their device.
        """
        if layout not in LAYOUT_CHOICES:
            raise ValueError(f"W4A16Linear.from_gptq: layout must be one of {LAYOUT_CHOICES}, got {layout!r}")
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
        if layout == "auto":
            layout = layer.preferred_layout()
        return layer.repack() if layout == "fragment" else layer

    @classmethod
    def from_linear(
        cls, linear: nn.Linear, group_size: int = 128, symmetric: bool = True, layout: str = "gptq"
    ) -> W4A16Linear:
        """Round-to-nearest quantization of an ``nn.Linear`` (fp16/bf16 keep their dtype, else fp16); ``layout``
        as :meth:`from_gptq`'s."""
        w = linear.weight.detach()
        dtype = w.dtype if w.dtype in (torch.float16, torch.bfloat16) else torch.float16
        t = quantize_rtn(w, group_size, symmetric, format="v2", scale_dtype=dtype)
        bias = None if linear.bias is None else linear.bias.detach()
        return cls.from_gptq(
            t.qweight, t.qzeros, t.scales, None, bias, format="v2", sym=symmetric, dtype=dtype, layout=layout
        )

    def dense_weight(self) -> torch.Tensor:
        """The dequantized ``[K, N]`` weight in the activation dtype (for dense baselines)."""
        qweight, scales, zeros = self._gptq_tensors()
        return dense_weight(qweight, scales, zeros, self.perm, self.group_size, group_index=self.group_index)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x [..., K]`` -> ``[..., N]`` in ``x``'s dtype."""
        x2 = x.reshape(-1, self.in_features)
        if self.layout == "fragment":
            y = w4a16_gemm_packed(x2, self.words, self.fragment_scales, self.fragment_zeros, self.perm, self.bias)
            return y.reshape(*x.shape[:-1], self.out_features)
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
            + ("" if self.layout == "gptq" else f", layout='{self.layout}'")
            + ("" if self.group_index is None else f", groups={self.scales.shape[0]} (a group per row)")
        )

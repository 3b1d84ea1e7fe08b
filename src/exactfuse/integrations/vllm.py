"""exactfuse inside vLLM: a ``vllm.general_plugins`` entry point (``register``) that vLLM calls in every
process before it builds a model (``pip install 'exactfuse[vllm]'``; docs/vllm.md).

What it replaces, each chosen by name in ``EXACTFUSE_VLLM_OPS`` (comma list, default all of :data:`OPS`):

- ``silu_and_mul``, ``gelu_and_mul``: vLLM's ``SiluAndMul`` / ``GeluAndMul`` custom ops, through
  ``CustomOp.register_oot``, by subclasses whose ``forward_cuda`` calls exactfuse's op (bit for bit the
  ops' ``forward_native`` on CUDA). They keep vLLM's op names, so ``custom_ops=["-silu_and_mul"]`` still
  turns one off.
- ``w4a16``: an ``MPLinearKernel`` placed first in vLLM's CUDA list for 4-bit symmetric GPTQ layers
  (``uint4b8``); its weights are converted once at load time and each call is ``exactfuse.w4a16_gemm``.
  ``can_implement`` refuses, with the reason, what the kernel does not take, and vLLM's next kernel runs.
- ``causal_conv1d``: the names ``causal_conv1d_fn`` / ``causal_conv1d_update`` in the modules of
  :data:`CONV_MODULES` (Mamba2's mixer, LFM2's ShortConv), mapped to exactfuse's ``causal_conv1d`` /
  ``causal_conv1d_update``; calls with arguments outside that mapping (prefix-caching block tables,
  speculative decoding, varlen decode, a wider state) go to vLLM's function unchanged.

Nothing here imports vLLM until ``register`` runs; ``import exactfuse`` never does.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import logging
import os
import re

import torch

import exactfuse
from exactfuse.ops.w4a16.packing import PACK

logger = logging.getLogger("vllm.plugins.exactfuse")  # under vLLM's logger, so its handler prints the line

ENV = "EXACTFUSE_VLLM_OPS"
OPS = ("silu_and_mul", "gelu_and_mul", "w4a16", "causal_conv1d")
MIN_VERSION = (0, 26)
TESTED = ("0.26.0",)
CONV_MODULES = ("vllm.model_executor.layers.mamba.mamba_mixer2", "vllm.model_executor.layers.mamba.short_conv")
_MARK = "_exactfuse"  # set on every class and function this module hands to vLLM


def selected_ops(value: str | None = None) -> tuple[str, ...]:
    """The ops ``EXACTFUSE_VLLM_OPS`` (or ``value``) names: unset or ``all`` -> :data:`OPS`; empty or
    ``none`` -> none. An unknown name is an error that lists the known ones."""
    value = os.environ.get(ENV) if value is None else value
    if value is None or value.strip().lower() == "all":
        return OPS
    names = [n.strip() for n in value.split(",") if n.strip()]
    if names in ([], ["none"]):
        return ()
    unknown = [n for n in names if n not in OPS]
    if unknown:
        raise ValueError(f"{ENV}={value!r}: unknown op(s) {unknown}; known: {', '.join(OPS)}, all, none")
    return tuple(n for n in OPS if n in names)


def version_tuple(version: str) -> tuple[int, int]:
    """``"0.26.0"`` -> ``(0, 26)``; a version without two leading numbers -> ``(0, 0)``."""
    m = re.match(r"(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def register() -> list[str]:
    """vLLM's plugin entry: replace the selected ops; return what was replaced (and log it on one line).
    Safe to call again (vLLM may load plugins more than once): a second call replaces nothing twice."""
    ops = selected_ops()
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        logger.warning("exactfuse: vllm is not installed; the plugin replaces nothing")
        return []
    if version_tuple(version) < MIN_VERSION:
        logger.warning(
            "exactfuse: the vLLM plugin needs vllm >= %d.%d (tested: %s), found %s; it replaces nothing",
            *MIN_VERSION, ", ".join(TESTED), version,
        )  # fmt: skip
        return []
    if version not in TESTED:
        logger.warning("exactfuse: vllm %s is newer than the versions tested (%s)", version, ", ".join(TESTED))
    from vllm.platforms import current_platform

    if not current_platform.is_cuda():
        logger.info("exactfuse: the vLLM plugin replaces nothing on %s (CUDA only)", type(current_platform).__name__)
        return []
    replaced: list[str] = []
    for name in ops:
        try:
            replaced += _REGISTER[name]()
        except (ImportError, AttributeError) as e:  # a vLLM without the names this version maps
            logger.warning("exactfuse: %s not replaced: vllm %s lacks what it maps (%s)", name, version, e)
    logger.info("exactfuse %s replaced in vllm %s: %s", ENV, version, ", ".join(replaced) or "nothing")
    return replaced


# ------------------------------------------------------------------------------------ activations
def _custom_op(name: str, make):
    """Register ``make(vllm_class)`` as the out-of-tree replacement of vLLM's activation class ``name``."""
    from vllm.model_executor.custom_op import CustomOp, op_registry_oot
    from vllm.model_executor.layers import activation

    if getattr(op_registry_oot.get(name), _MARK, False):
        return [name]
    base = getattr(activation, name)
    cls = make(base)
    vllm_name = base.name  # register_oot names the class after the replaced one; keep vLLM's op name
    CustomOp.register_oot(cls, name=name)
    cls.name = vllm_name
    return [name]


def silu_and_mul_class(base: type) -> type:
    """A subclass of vLLM's ``SiluAndMul`` whose CUDA forward is ``exactfuse.silu_and_mul``."""

    class ExactfuseSiluAndMul(base):
        _exactfuse = True

        def __init__(self, *, compile_native: bool = True):
            # CustomOp's own initialization; vLLM's SiluAndMul.__init__ would bind its compiled op
            super(base, self).__init__(compile_native=compile_native)

        def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
            return exactfuse.silu_and_mul(x)

    return ExactfuseSiluAndMul


def gelu_and_mul_class(base: type) -> type:
    """A subclass of vLLM's ``GeluAndMul`` whose CUDA forward is ``exactfuse.gelu_and_mul``."""

    class ExactfuseGeluAndMul(base):
        _exactfuse = True

        def __init__(self, approximate: str = "none"):
            super(base, self).__init__()
            if approximate not in ("none", "tanh"):
                raise ValueError(f"GeluAndMul: approximate must be 'none' or 'tanh', got {approximate!r}")
            self.approximate = approximate

        def forward_cuda(self, x: torch.Tensor) -> torch.Tensor:
            return exactfuse.gelu_and_mul(x, self.approximate)

    return ExactfuseGeluAndMul


# ------------------------------------------------------------------------------------------ W4A16
def w4a16_refusal(
    weight_type: str,
    zero_points: bool,
    act_type: torch.dtype,
    group_size: int,
    partition_shape: tuple[int, int],
    has_g_idx: bool,
) -> str | None:
    """Why exactfuse's kernel cannot take a vLLM mixed-precision layer, or None when it can.
    ``weight_type``: vLLM's scalar type name (``"uint4b8"``: 4-bit, zero point 8); ``partition_shape``:
    this rank's ``(in, out)`` features."""
    K, N = partition_shape
    if weight_type != "uint4b8":
        return f"exactfuse's w4a16_gemm takes 4-bit symmetric weights (uint4b8), got {weight_type}"
    if zero_points:
        return "explicit zero points (asymmetric layouts) are not mapped to exactfuse's w4a16_gemm"
    if act_type not in (torch.float16, torch.bfloat16):
        return f"exactfuse's w4a16_gemm takes float16 or bfloat16 activations, got {act_type}"
    if K % PACK or N % PACK:
        return f"in and out features per partition must be multiples of {PACK}, got {K} x {N}"
    if group_size != -1 and (group_size < 16 or group_size & (group_size - 1)):
        return f"group_size {group_size}: exactfuse's kernels take -1 (per channel) or a power of two >= 16"
    if group_size != -1 and not has_g_idx and K % group_size:
        return f"group_size {group_size} does not divide the partition's {K} input features"
    return None


def w4a16_kernel_class(base: type, permute_layout, replace_parameter) -> type:
    """An ``MPLinearKernel`` (``base``) over ``exactfuse.w4a16_gemm`` for GPTQ-layout weights: qweight
    packed along the input features, scales ``[groups, out]``, optional act-order ``g_idx``."""
    from exactfuse.ops.w4a16.packing import prepare_gptq

    class ExactfuseW4A16LinearKernel(base):
        _exactfuse = True

        @classmethod
        def get_min_capability(cls) -> int:
            return 80  # the kernels' bf16 tl.dot

        @classmethod
        def can_implement(cls, c) -> tuple[bool, str | None]:
            reason = w4a16_refusal(
                str(c.weight_type), c.zero_points, c.act_type, c.group_size, tuple(c.partition_weight_shape),
                c.has_g_idx,
            )  # fmt: skip
            return reason is None, reason

        def process_weights_after_loading(self, layer: torch.nn.Module) -> None:
            c = self.config
            qweight, scales = getattr(layer, self.w_q_name), getattr(layer, self.w_s_name)
            if getattr(qweight, "packed_dim", None) != getattr(qweight, "input_dim", 0):
                raise ValueError(
                    f"{type(self).__name__}: {self.w_q_name} is packed along the output features; exactfuse "
                    "takes GPTQ's packing along the input features"
                )
            permute_layout(qweight, input_dim=0, output_dim=1, packed_dim=0)
            permute_layout(scales, input_dim=0, output_dim=1)
            q, s = qweight.data.contiguous(), scales.data.to(c.act_type).contiguous()
            K = q.shape[0] * PACK
            group_size = -1 if c.group_size == -1 else c.group_size
            perm = group_index = None
            if c.has_g_idx:
                g_idx = getattr(layer, self.w_gidx_name).data.to(torch.int32)
                try:  # rows sorted by group once: each group contiguous, as without act order
                    prepared = prepare_gptq(q, None, s, g_idx, sym=True)
                    q, perm, group_size = prepared.qweight, prepared.perm, prepared.group_size
                except ValueError:  # a shard whose groups are uneven: each row names its scale row
                    group_index = g_idx.contiguous()
            elif group_size != -1 and s.shape[0] != K // group_size:
                group_size = -1 if s.shape[0] == 1 else K // s.shape[0]
            replace_parameter(layer, self.w_q_name, torch.nn.Parameter(q, requires_grad=False))
            replace_parameter(layer, self.w_s_name, torch.nn.Parameter(s, requires_grad=False))
            layer.exactfuse_perm, layer.exactfuse_group_index = perm, group_index
            layer.exactfuse_group_size = group_size

        def apply_weights(self, layer: torch.nn.Module, x: torch.Tensor, bias: torch.Tensor | None = None):
            qweight, scales = getattr(layer, self.w_q_name), getattr(layer, self.w_s_name)
            a = x.reshape(-1, x.shape[-1])
            fused_bias = bias if bias is not None and bias.dtype == a.dtype else None
            out = exactfuse.w4a16_gemm(
                a, qweight, scales, None, layer.exactfuse_perm, fused_bias, layer.exactfuse_group_size, True,
                layer.exactfuse_group_index,
            )  # fmt: skip
            if bias is not None and fused_bias is None:
                out = out + bias
            return out.reshape(*x.shape[:-1], out.shape[-1])

    return ExactfuseW4A16LinearKernel


def _register_w4a16() -> list[str]:
    from vllm.model_executor.kernels import linear
    from vllm.model_executor.kernels.linear.mixed_precision.MPLinearKernel import MPLinearKernel
    from vllm.model_executor.layers.quantization.utils import replace_parameter
    from vllm.model_executor.parameter import permute_param_layout_
    from vllm.platforms import PlatformEnum

    kernels = linear._POSSIBLE_KERNELS.setdefault(PlatformEnum.CUDA, [])
    if not any(getattr(k, _MARK, False) for k in kernels):
        kernels.insert(0, w4a16_kernel_class(MPLinearKernel, permute_param_layout_, replace_parameter))
    return ["MPLinearKernel[0]=ExactfuseW4A16LinearKernel"]


# ------------------------------------------------------------------------------------ causal conv
def _activation(activation) -> str | bool | None:
    """vLLM's activation argument as exactfuse's, or False when it has no exactfuse form."""
    if activation in (None, False):
        return None
    return "silu" if activation in (True, "silu", "swish") else False


def _conv_args_match(x, conv_state, weight, bias, activation) -> bool:
    return (
        conv_state is not None
        and conv_state.dim() == 3
        and conv_state.shape[2] == weight.shape[1] - 1
        and weight.dtype == conv_state.dtype
        and (bias is None or bias.dtype == conv_state.dtype)
        and _activation(activation) is not False
    )


def _state_column(indices: torch.Tensor | None) -> torch.Tensor | None:
    """vLLM's state indices ``[B]`` or ``[B, blocks]``: without prefix caching (no block pointers) its
    kernels read a request's state in column 0, a strided ``[B]`` view here."""
    return indices[:, 0] if indices is not None and indices.dim() == 2 else indices


def conv_fn_adapter(original):
    """vLLM's ``causal_conv1d_fn`` (x ``[C, T]``, a view of the channel-last ``[T, C]``; returns ``[C, T]``)
    over ``exactfuse.causal_conv1d``; ``original`` takes the calls outside the mapping."""

    def causal_conv1d_fn(x, weight, bias, conv_states, query_start_loc, cache_indices=None, has_initial_state=None,
                         activation="silu", pad_slot_id=-1, null_block_id=0, block_idx_first_scheduled_token=None,
                         block_idx_last_scheduled_token=None, initial_state_idx=None, num_computed_tokens=None,
                         block_size_to_align=0, metadata=None, validate_data=False):  # fmt: skip
        cached_blocks = (block_idx_first_scheduled_token, block_idx_last_scheduled_token, initial_state_idx)
        if (
            x.dim() != 2
            or cache_indices is None
            or null_block_id is None
            or any(t is not None for t in cached_blocks)
            or not _conv_args_match(x, conv_states, weight, bias, activation)
        ):
            return original(
                x, weight, bias, conv_states, query_start_loc, cache_indices, has_initial_state, activation,
                pad_slot_id, null_block_id, block_idx_first_scheduled_token, block_idx_last_scheduled_token,
                initial_state_idx, num_computed_tokens, block_size_to_align, metadata, validate_data,
            )  # fmt: skip
        rows = x.to(conv_states.dtype).transpose(0, 1)
        out = exactfuse.causal_conv1d(
            rows if rows.stride(1) == 1 else rows.contiguous(), weight, bias, activation=_activation(activation),
            conv_state=conv_states, query_start_loc=query_start_loc, state_indices=_state_column(cache_indices),
            has_initial_state=has_initial_state, null_block_id=null_block_id,
        )  # fmt: skip
        return out.to(x.dtype).transpose(0, 1)

    causal_conv1d_fn._exactfuse = True
    causal_conv1d_fn.__wrapped__ = original
    return causal_conv1d_fn


def conv_update_adapter(original):
    """vLLM's ``causal_conv1d_update`` (x ``[B, C]`` or ``[B, C, L]``) over ``exactfuse.causal_conv1d_update``;
    ``original`` takes the calls outside the mapping."""

    def causal_conv1d_update(x, conv_state, weight, bias=None, activation=None, conv_state_indices=None,
                             num_accepted_tokens=None, query_start_loc=None, max_query_len=-1, null_block_id=0,
                             block_idx_last_scheduled_token=None, initial_state_idx=None,
                             validate_data=False):  # fmt: skip
        if (
            x.dim() not in (2, 3)
            or conv_state_indices is None
            or null_block_id is None
            or num_accepted_tokens is not None
            or query_start_loc is not None
            or block_idx_last_scheduled_token is not None
            or initial_state_idx is not None
            or not _conv_args_match(x, conv_state, weight, bias, activation)
        ):
            return original(
                x, conv_state, weight, bias, activation, conv_state_indices, num_accepted_tokens, query_start_loc,
                max_query_len, null_block_id, block_idx_last_scheduled_token, initial_state_idx, validate_data,
            )  # fmt: skip
        rows = x.to(conv_state.dtype)
        if x.dim() == 3:  # [B, C, L] -> a sequence's L rows adjacent
            rows = rows.transpose(1, 2).contiguous()
        out = exactfuse.causal_conv1d_update(
            rows, conv_state, weight, bias, activation=_activation(activation),
            state_indices=_state_column(conv_state_indices),
            null_block_id=null_block_id,
        )  # fmt: skip
        return (out.transpose(1, 2) if x.dim() == 3 else out).to(x.dtype)

    causal_conv1d_update._exactfuse = True
    causal_conv1d_update.__wrapped__ = original
    return causal_conv1d_update


def _register_conv() -> list[str]:
    replaced = []
    for name in CONV_MODULES:
        module = importlib.import_module(name)
        for attr, adapter in (("causal_conv1d_fn", conv_fn_adapter), ("causal_conv1d_update", conv_update_adapter)):
            current = getattr(module, attr)
            if not getattr(current, _MARK, False):
                setattr(module, attr, adapter(current))
        replaced.append(f"{name.rsplit('.', 1)[-1]}.causal_conv1d_fn/_update")
    return replaced


_REGISTER = {
    "silu_and_mul": lambda: _custom_op("SiluAndMul", silu_and_mul_class),
    "gelu_and_mul": lambda: _custom_op("GeluAndMul", gelu_and_mul_class),
    "w4a16": _register_w4a16,
    "causal_conv1d": _register_conv,
}

__all__ = ["CONV_MODULES", "ENV", "OPS", "TESTED", "register", "selected_ops", "w4a16_refusal"]

"""Peer libraries timed beside exactfuse: adapters keyed by op name.

A :class:`PeerAdapter` says whether its library is importable here
(``available``), whether it can run a case (``accepts``) and how to turn the
op's arguments into a zero-argument call of the peer (``prepare``). Argument
conversion (splitting, copies) happens in ``prepare``, outside the timed
region: the peer is timed on the inputs it natively takes. Peers have no
contract; the runner checks them against native with the dtype Tolerance and
reports their error.

Add one with :func:`register_peer`; the runner picks up every available
adapter whose ``op`` is being benchmarked.
"""

from __future__ import annotations

import functools
import importlib
import importlib.metadata
from collections.abc import Callable
from dataclasses import dataclass

import torch

PreparedCall = Callable[[], object]


def _always(*args, **kwargs) -> bool:
    return True


@dataclass(frozen=True)
class PeerAdapter:
    """One peer implementation of one exactfuse op.

    name: column name in results (``liger``). op: the exactfuse op it stands
    in for. available: library importable and usable here (called once per
    run). prepare: ``(args, kwargs) -> zero-arg call`` on the op's arguments.
    accepts: ``(*args, **kwargs) -> bool`` for the cases it supports.
    distribution: the package whose version goes into the results.
    """

    name: str
    op: str
    available: Callable[[], bool]
    prepare: Callable[[tuple, dict], PreparedCall]
    accepts: Callable[..., bool] = _always
    distribution: str | None = None

    def version(self) -> str | None:
        if self.distribution is None:
            return None
        try:
            return importlib.metadata.version(self.distribution)
        except importlib.metadata.PackageNotFoundError:
            return None


PEERS: dict[str, dict[str, PeerAdapter]] = {}


def register_peer(adapter: PeerAdapter) -> PeerAdapter:
    """Add ``adapter`` for its op; a second adapter of the same name for the op is an error."""
    by_name = PEERS.setdefault(adapter.op, {})
    if adapter.name in by_name:
        raise ValueError(f"peer {adapter.name!r} is already registered for op {adapter.op!r}")
    by_name[adapter.name] = adapter
    return adapter


def unregister_peer(op: str, name: str) -> None:
    PEERS.get(op, {}).pop(name, None)


def peers_for(op: str) -> list[PeerAdapter]:
    """The adapters registered for ``op`` whose library is available here."""
    return [a for a in PEERS.get(op, {}).values() if a.available()]


# ------------------------------------------------------------ Liger-Kernel
def _importable_on_cuda(module: str) -> Callable[[], bool]:
    @functools.cache
    def available() -> bool:
        if not torch.cuda.is_available():
            return False  # Liger's kernels are Triton kernels for a GPU
        try:
            importlib.import_module(module)
        except Exception:  # not installed, or incompatible with this torch/triton
            return False
        return True

    return available


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
        _importable_on_cuda("liger_kernel.ops.swiglu"),
        _liger_swiglu,
        distribution="liger-kernel",
    )
)
register_peer(
    PeerAdapter(
        "liger",
        "gelu_and_mul",
        _importable_on_cuda("liger_kernel.ops.geglu"),
        _liger_geglu,
        # Liger's GEGLU implements the tanh approximation only.
        accepts=lambda *args, **kwargs: _approximate(args, kwargs) == "tanh",
        distribution="liger-kernel",
    )
)


# ------------------------------------------------- W4A16 baselines (torch)
def _cuda_only() -> bool:
    return torch.cuda.is_available()


def _w4a16_args(args: tuple, kwargs: dict) -> dict:
    """The op's arguments by name, defaults filled in (the native spec's signature)."""
    from exactfuse.ops.w4a16 import w4a16_gemm

    bound = w4a16_gemm.signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _w4a16_cublas_dense(args: tuple, kwargs: dict) -> PreparedCall:
    """cuBLAS on the weight dequantized once, outside the timed region: the dense-GEMM bound."""
    from exactfuse.ops.w4a16 import dense_weight

    x = _w4a16_args(args, kwargs)
    a, bias = x["a"], x["bias"]
    w = dense_weight(x["qweight"], x["scales"], x["zeros"], x["perm"], x["group_size"], a.dtype)
    if bias is None:
        return lambda: torch.matmul(a, w)
    return lambda: torch.addmm(bias, a, w)


def _int4pack_accepts(*args, **kwargs) -> bool:
    # tinygemm: bf16, groups of 32..256 along K, K a multiple of 1024 (8 inner K tiles of 16 pairs)
    x = _w4a16_args(args, kwargs)
    return (
        hasattr(torch, "_weight_int4pack_mm")
        and x["a"].dtype == torch.bfloat16
        and x["zeros"] is None
        and x["perm"] is None
        and x["group_size"] in (32, 64, 128, 256)
        and x["a"].shape[1] % 1024 == 0
    )


def _w4a16_torch_int4(args: tuple, kwargs: dict) -> PreparedCall:
    """``torch._weight_int4pack_mm`` (tinygemm) on the same 4-bit codes and scales, zero offset 0.

    Its dequantization is ``(q - 8) * scale + zero`` per group, so the symmetric
    GPTQ weight ``(q - 8) * scale`` is ``zero = 0``. Weights are repacked with
    ``_convert_weight_to_int4pack`` (``[N, K/2]`` uint8, even k in the high
    nibble) outside the timed region.
    """
    from exactfuse.ops.w4a16.packing import unpack_rows

    x = _w4a16_args(args, kwargs)
    a, scales, bias, group_size = x["a"], x["scales"], x["bias"], x["group_size"]
    q = unpack_rows(x["qweight"]).t().contiguous()  # [N, K] codes 0..15
    packed = torch._convert_weight_to_int4pack(((q[:, ::2] << 4) | q[:, 1::2]).to(torch.uint8), 8)
    scales_zeros = torch.stack([scales, torch.zeros_like(scales)], dim=2).contiguous()  # [K/G, N, 2]
    if bias is None:
        return lambda: torch._weight_int4pack_mm(a, packed, group_size, scales_zeros)
    return lambda: torch._weight_int4pack_mm(a, packed, group_size, scales_zeros) + bias


register_peer(PeerAdapter("cublas-dense", "w4a16_gemm", _cuda_only, _w4a16_cublas_dense))
register_peer(PeerAdapter("torch-int4", "w4a16_gemm", _cuda_only, _w4a16_torch_int4, accepts=_int4pack_accepts))

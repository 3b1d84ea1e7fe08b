"""GPTQ 4-bit checkpoint tensors and the layout the W4A16 kernel reads.

GPTQ checkpoint format (what :func:`prepare_gptq` reads):

- ``qweight [K/8, N]`` int32, packed along K: element ``k`` of column ``n`` is
  the 4-bit field at bits ``4 * (k % 8)`` of word ``qweight[k // 8, n]``.
- ``qzeros [K/G, N/8]`` int32, packed along N the same way (element ``n`` at
  bits ``4 * (n % 8)`` of word ``n // 8``). Format ``"v1"`` stores the zero
  point minus one (so a true zero point of 0 cannot be stored), ``"v2"`` the
  zero point itself. Symmetric checkpoints have zero point 8 and may omit it.
- ``scales [K/G, N]`` fp16/bf16; ``G`` is K divided by the number of scale
  rows (one row: per-channel, reported as group size -1).
- ``g_idx [K]`` (optional, act-order): the group of each row of K.

Prepared layout (what the kernel reads, :class:`PreparedW4A16`):

- ``qweight [K/8, N]`` int32, the GPTQ packing with the rows of K sorted by
  group (act-order resolved once, at load time). The kernel loads a
  ``[BK/8, BN]`` tile (consecutive int32 words along N: 16-byte vector loads)
  and unpacks the 8 nibbles of a word into 8 consecutive K rows in registers,
  so every weight byte is read from memory exactly once.
- ``scales [K/G, N]`` in the activation dtype, one row per group.
- ``zeros [K/G, N]`` uint8 true zero points (v1's "minus one" undone; values
  0..16), or ``None`` for symmetric weights (zero point 8).
- ``perm [K]`` int32 or ``None``: the prepared K row ``i`` is checkpoint row
  ``perm[i]``; the op reads activations ``a[:, perm]``, so callers never permute.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

BITS = 4
PACK = 32 // BITS  # nibbles per int32 word
SYMMETRIC_ZERO = 8
FORMATS = ("v1", "v2")
FLOAT_DTYPES = (torch.float16, torch.bfloat16)
INDEX_DTYPES = (torch.int32, torch.int64)


class GPTQTensors(NamedTuple):
    """Checkpoint-format tensors (see the module docstring)."""

    qweight: torch.Tensor
    qzeros: torch.Tensor | None
    scales: torch.Tensor
    g_idx: torch.Tensor | None
    format: str
    sym: bool


class PreparedW4A16(NamedTuple):
    """Kernel-layout tensors: the arguments of ``w4a16_gemm`` after ``a``."""

    qweight: torch.Tensor
    scales: torch.Tensor
    zeros: torch.Tensor | None
    perm: torch.Tensor | None
    group_size: int


# --------------------------------------------------------------- bit packing
def _shifts(device: torch.device) -> torch.Tensor:
    return torch.arange(0, 32, BITS, dtype=torch.int32, device=device)


def unpack_rows(packed: torch.Tensor) -> torch.Tensor:
    """``[R/8, C]`` int32 packed along rows -> ``[R, C]`` int32 values 0..15."""
    nibbles = (packed.unsqueeze(1) >> _shifts(packed.device).view(1, PACK, 1)) & 0xF
    return nibbles.reshape(packed.shape[0] * PACK, packed.shape[1])


def pack_rows(values: torch.Tensor) -> torch.Tensor:
    """``[R, C]`` integers 0..15 -> ``[R/8, C]`` int32 packed along rows (exact inverse of unpack)."""
    if values.shape[0] % PACK:
        raise ValueError(f"pack_rows: rows must be a multiple of {PACK}, got shape {list(values.shape)}")
    v = values.to(torch.int64).reshape(values.shape[0] // PACK, PACK, values.shape[1])
    word = (v << _shifts(values.device).to(torch.int64).view(1, PACK, 1)).sum(dim=1)
    word = torch.where(word >= 2**31, word - 2**32, word)  # two's complement of the top nibble
    return word.to(torch.int32)


def unpack_cols(packed: torch.Tensor) -> torch.Tensor:
    """``[R, C/8]`` int32 packed along columns -> ``[R, C]`` int32 values 0..15."""
    return unpack_rows(packed.t()).t().contiguous()


def pack_cols(values: torch.Tensor) -> torch.Tensor:
    """``[R, C]`` integers 0..15 -> ``[R, C/8]`` int32 packed along columns."""
    if values.shape[1] % PACK:
        raise ValueError(f"pack_cols: columns must be a multiple of {PACK}, got shape {list(values.shape)}")
    return pack_rows(values.t()).t().contiguous()


# --------------------------------------------------------------- validation
def _expect(name: str, t: torch.Tensor | None, shape: tuple[int, ...], dtypes: tuple[torch.dtype, ...]) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"prepare_gptq: {name} must be a tensor of shape {list(shape)}, got {type(t).__name__}")
    if tuple(t.shape) != shape:
        raise ValueError(f"prepare_gptq: {name} must be {list(shape)}, got {list(t.shape)}")
    if t.dtype not in dtypes:
        names = " or ".join(str(d).removeprefix("torch.") for d in dtypes)
        raise TypeError(f"prepare_gptq: {name} must be {names}, got {t.dtype}")


def check_gptq(
    qweight: torch.Tensor, qzeros: torch.Tensor | None, scales: torch.Tensor, g_idx: torch.Tensor | None
) -> tuple[int, int, int]:
    """Validate checkpoint tensors; return ``(K, N, group_size)`` (-1: per-channel)."""
    if not isinstance(qweight, torch.Tensor) or qweight.dim() != 2:
        got = list(qweight.shape) if isinstance(qweight, torch.Tensor) else type(qweight).__name__
        raise ValueError(f"prepare_gptq: qweight must be 2-D [K/8, N] int32, got {got}")
    K, N = qweight.shape[0] * PACK, qweight.shape[1]
    _expect("qweight", qweight, (K // PACK, N), (torch.int32,))
    if N % PACK:
        raise ValueError(f"prepare_gptq: N (qweight.shape[1]) must be a multiple of {PACK}, got {N}")
    if not isinstance(scales, torch.Tensor) or scales.dim() != 2 or scales.shape[1] != N:
        got = list(scales.shape) if isinstance(scales, torch.Tensor) else type(scales).__name__
        raise ValueError(f"prepare_gptq: scales must be [K/group_size, N] = [?, {N}], got {got}")
    groups = scales.shape[0]
    if groups < 1 or K % groups:
        raise ValueError(f"prepare_gptq: K = {K} must be a multiple of the group size (scales has {groups} rows)")
    G = K // groups
    _expect("scales", scales, (groups, N), FLOAT_DTYPES)
    if qzeros is not None:
        _expect("qzeros", qzeros, (groups, N // PACK), (torch.int32,))
    if g_idx is not None:
        _expect("g_idx", g_idx, (K,), INDEX_DTYPES)
        if K and (int(g_idx.min()) < 0 or int(g_idx.max()) >= groups):
            raise ValueError(
                f"prepare_gptq: g_idx values must be in [0, {groups}) (K/group_size), "
                f"got range [{int(g_idx.min())}, {int(g_idx.max())}]"
            )
    return K, N, (-1 if groups == 1 else G)


# --------------------------------------------------------------- conversion
def zero_points(qzeros: torch.Tensor | None, groups: int, N: int, format: str, device) -> torch.Tensor:
    """True zero points ``[K/G, N]`` int32 (v1 adds one back; absent: 8)."""
    if format not in FORMATS:
        raise ValueError(f"prepare_gptq: format must be 'v1' or 'v2', got {format!r}")
    if qzeros is None:
        return torch.full((groups, N), SYMMETRIC_ZERO, dtype=torch.int32, device=device)
    z = unpack_cols(qzeros)
    return z + 1 if format == "v1" else z


def group_index(K: int, group_size: int, g_idx: torch.Tensor | None, device) -> torch.Tensor:
    """Group of each checkpoint row ``[K]`` int64."""
    if g_idx is not None:
        return g_idx.to(torch.int64)
    G = K if group_size == -1 else group_size
    return torch.arange(K, device=device) // G


def prepare_gptq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor | None,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None = None,
    *,
    bits: int = 4,
    format: str = "v1",
    sym: bool | None = None,
) -> PreparedW4A16:
    """Validate GPTQ checkpoint tensors and convert them to the kernel layout.

    ``sym=None`` infers symmetry (no ``qzeros``, or every zero point is 8);
    ``sym=True`` requires every stored zero point to be 8. Act-order ``g_idx``
    must give each group exactly ``K / groups`` rows (as GPTQ writes it).
    """
    if bits != BITS:
        raise ValueError(f"prepare_gptq: only bits=4 is supported, got bits={bits}")
    K, N, group_size = check_gptq(qweight, qzeros, scales, g_idx)
    groups = scales.shape[0]
    z = zero_points(qzeros, groups, N, format, qweight.device)
    all_eight = bool((z == SYMMETRIC_ZERO).all())
    if sym is None:
        sym = all_eight
    elif sym and not all_eight:
        raise ValueError(
            f"prepare_gptq: sym=True but qzeros holds zero points other than 8 (format {format!r}); "
            "pass sym=False or the right format"
        )
    perm = None
    if g_idx is not None:
        g = g_idx.to(torch.int64)
        G = K // groups
        if not torch.equal(g, torch.arange(K, device=g.device) // G):
            counts = torch.bincount(g, minlength=groups)
            if bool((counts != G).any()):
                raise ValueError(
                    f"prepare_gptq: g_idx must assign exactly K/groups = {G} rows to each of the {groups} groups"
                )
            perm = torch.argsort(g, stable=True)
    q = qweight
    if perm is not None:
        q = pack_rows(unpack_rows(qweight)[perm])
        perm = perm.to(torch.int32)
    zeros = None if sym else z.to(torch.uint8).contiguous()
    return PreparedW4A16(q.contiguous(), scales.contiguous(), zeros, perm, group_size)


def dequantize_gptq(
    qweight: torch.Tensor,
    qzeros: torch.Tensor | None,
    scales: torch.Tensor,
    g_idx: torch.Tensor | None = None,
    *,
    format: str = "v1",
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Dense ``[K, N]`` weight straight from checkpoint tensors (reference for tests).

    ``W[k, n] = (q[k, n] - z[g(k), n]).to(dtype) * scales[g(k), n].to(dtype)``.
    """
    K, N, group_size = check_gptq(qweight, qzeros, scales, g_idx)
    dtype = dtype or scales.dtype
    g = group_index(K, group_size, g_idx, qweight.device)
    z = zero_points(qzeros, scales.shape[0], N, format, qweight.device)
    return (unpack_rows(qweight) - z[g]).to(dtype) * scales.to(dtype)[g]


# --------------------------------------------------------------- quantizer
def quantize_rtn(
    w: torch.Tensor,
    group_size: int = 128,
    symmetric: bool = True,
    *,
    format: str = "v1",
    order: torch.Tensor | None = None,
    scale_dtype: torch.dtype | None = None,
) -> GPTQTensors:
    """Round-to-nearest 4-bit quantization of ``w [N, K]`` (``nn.Linear.weight``) to GPTQ tensors.

    Symmetric: ``scale = max|w| / 7`` per group, zero point 8. Asymmetric:
    ``scale = (max - min) / 15``, zero point ``round(-min / scale)``; format
    ``"v1"`` cannot store a zero point of 0, so it is clamped to 1 there.
    ``order`` (a permutation of K) simulates act-order: groups are formed over
    ``w[:, order]`` and ``g_idx`` records each row's group. ``group_size=-1``
    is per-channel. Scales are ``scale_dtype`` (default: ``w``'s dtype if fp16/bf16, else fp16).
    """
    if w.dim() != 2:
        raise ValueError(f"quantize_rtn: w must be [N, K], got {list(w.shape)}")
    N, K = w.shape
    G = K if group_size == -1 else group_size
    if G <= 0 or K % G or K % PACK:
        raise ValueError(f"quantize_rtn: K = {K} must be a multiple of group_size = {group_size} and of {PACK}")
    if N % PACK:
        raise ValueError(f"quantize_rtn: N = {N} must be a multiple of {PACK}")
    if format not in FORMATS:
        raise ValueError(f"quantize_rtn: format must be 'v1' or 'v2', got {format!r}")
    scale_dtype = scale_dtype or (w.dtype if w.dtype in FLOAT_DTYPES else torch.float16)
    wt = w.t().float()  # [K, N]
    if order is not None:
        wt = wt[order.to(torch.int64)]
    wg = wt.reshape(K // G, G, N)
    if symmetric:
        scale = wg.abs().amax(dim=1) / 7
        scale = torch.where(scale > 0, scale, torch.ones_like(scale)).to(scale_dtype)
        zero = torch.full_like(scale, SYMMETRIC_ZERO, dtype=torch.int32)
    else:
        lo, hi = wg.amin(dim=1).clamp(max=0), wg.amax(dim=1).clamp(min=0)
        scale = (hi - lo) / 15
        scale = torch.where(scale > 0, scale, torch.ones_like(scale)).to(scale_dtype)
        zero = torch.round(-lo / scale.float()).clamp(1 if format == "v1" else 0, 15).to(torch.int32)
    q = torch.round(wg / scale.float().unsqueeze(1)) + zero.unsqueeze(1)
    q = q.clamp(0, 15).to(torch.int32).reshape(K, N)
    g_idx = None
    if order is not None:
        inverse = torch.empty_like(order, dtype=torch.int64)
        inverse[order.to(torch.int64)] = torch.arange(K, device=order.device)
        q = q[inverse]
        g_idx = (inverse // G).to(torch.int32)
    stored = zero - 1 if format == "v1" else zero
    qzeros = None if symmetric and format == "v2" else pack_cols(stored)
    return GPTQTensors(pack_rows(q), qzeros, scale.contiguous(), g_idx, format, symmetric)


def random_weights(
    K: int,
    N: int,
    dtype: torch.dtype,
    device,
    gen: torch.Generator,
    *,
    group_size: int = 128,
    symmetric: bool = True,
    act_order: bool = False,
    format: str = "v1",
) -> PreparedW4A16:
    """RTN-quantized random ``[N, K]`` weights (scale ~1/sqrt(K)) in the prepared layout on ``device``."""
    w = torch.randn((N, K), generator=gen) / K**0.5
    order = torch.randperm(K, generator=gen) if act_order else None
    t = quantize_rtn(w, group_size, symmetric, format=format, order=order, scale_dtype=dtype)
    prepared = prepare_gptq(t.qweight, t.qzeros, t.scales, t.g_idx, format=format, sym=symmetric)
    return PreparedW4A16(*(x.to(device) if isinstance(x, torch.Tensor) else x for x in prepared))

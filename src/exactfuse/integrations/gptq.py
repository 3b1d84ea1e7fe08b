"""GPTQ checkpoints for any ``nn.Module`` model: ``save_gptq`` (round-to-nearest) and ``load_gptq``.

A checkpoint directory holds ``quantize_config.json`` and ``model.safetensors``. Each quantized
``nn.Linear`` at path ``P`` is stored as ``P.qweight`` ``[K/8, N]`` int32, ``P.qzeros`` ``[K/G, N/8]``
int32, ``P.scales`` ``[K/G, N]`` fp16, ``P.g_idx`` ``[K]`` int32 and ``P.bias`` when it has one (the
layouts in :mod:`exactfuse.ops.w4a16.packing`); every other tensor of the state dict is stored by its
name. The config keys read: ``bits`` (4), ``group_size``, ``desc_act``, ``sym``, ``checkpoint_format``
(``"gptq"``: zero points stored minus one, ``"gptq_v2"``: as they are).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from pathlib import Path

import torch
from torch import nn

from exactfuse.layers.w4a16 import LAYOUT_CHOICES, W4A16Linear
from exactfuse.ops.w4a16.packing import PACK, SYMMETRIC_ZERO, pack_cols, quantize_rtn

log = logging.getLogger(__name__)

CONFIG = "quantize_config.json"
WEIGHTS = "model.safetensors"
FORMATS = {"gptq": "v1", "gptq_v2": "v2"}
# nn.Linear names quantized by default: the decoder's projections (not embeddings or the LM head)
PROJECTIONS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")


def _safetensors():
    try:
        import safetensors.torch
    except ImportError as exc:  # pragma: no cover - safetensors comes with transformers
        raise ImportError("GPTQ checkpoints need the safetensors package (pip install safetensors)") from exc
    return safetensors.torch


def _quantizable(model: nn.Module, names: Iterable[str]) -> dict[str, nn.Linear]:
    names = tuple(names)
    return {
        path: m
        for path, m in model.named_modules()
        if isinstance(m, nn.Linear) and path.rsplit(".", 1)[-1] in names and m.in_features % PACK == 0
        and m.out_features % PACK == 0
    }  # fmt: skip


def save_gptq(
    model: nn.Module,
    path: str | Path,
    *,
    group_size: int = 128,
    sym: bool = True,
    names: Iterable[str] = PROJECTIONS,
) -> list[str]:
    """Quantize ``model``'s projections (``nn.Linear`` named one of ``names``, K and N multiples of 8)
    with :func:`~exactfuse.ops.w4a16.packing.quantize_rtn` and write a GPTQ directory at ``path``;
    returns the quantized module paths. The model is not changed."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    linears = _quantizable(model, names)
    tensors: dict[str, torch.Tensor] = {}
    for p, m in linears.items():
        t = quantize_rtn(m.weight.detach().cpu(), group_size, sym, format="v1", scale_dtype=torch.float16)
        K = m.in_features
        qzeros = t.qzeros
        if qzeros is None:  # symmetric: stored as GPTQ stores them, zero point 8 minus one
            stored = torch.full((t.scales.shape[0], m.out_features), SYMMETRIC_ZERO - 1, dtype=torch.int32)
            qzeros = pack_cols(stored)
        G = K if group_size == -1 else group_size
        g_idx = torch.arange(K, dtype=torch.int32) // G
        tensors.update({f"{p}.qweight": t.qweight, f"{p}.qzeros": qzeros, f"{p}.scales": t.scales,
                        f"{p}.g_idx": g_idx})  # fmt: skip
        if m.bias is not None:
            tensors[f"{p}.bias"] = m.bias.detach().cpu().to(torch.float16)
    skip = {f"{p}.{n}" for p in linears for n in ("weight", "bias")}
    for name, value in model.state_dict().items():
        if name not in skip:
            tensors[name] = value.detach().cpu().contiguous()
    _safetensors().save_file(_untied(tensors), str(out / WEIGHTS))
    config = {"bits": 4, "group_size": group_size, "desc_act": False, "sym": sym, "checkpoint_format": "gptq"}
    (out / CONFIG).write_text(json.dumps(config, indent=2) + "\n")
    return list(linears)


def _untied(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share memory (tied embeddings): store copies."""
    seen: set[int] = set()
    out = {}
    for name, t in tensors.items():
        ptr = t.untyped_storage().data_ptr()
        out[name] = t.clone() if ptr in seen and t.numel() else t
        seen.add(ptr)
    return out


def read_config(path: str | Path) -> dict:
    """``quantize_config.json`` of a GPTQ directory, checked; errors name the key."""
    file = Path(path) / CONFIG
    if not file.is_file():
        raise FileNotFoundError(f"load_gptq: no {CONFIG} in {path}")
    config = json.loads(file.read_text())
    if config.get("bits") != 4:
        raise ValueError(f"load_gptq: {CONFIG} 'bits' is {config.get('bits')!r}; exactfuse reads 4-bit GPTQ only")
    fmt = config.get("checkpoint_format", "gptq")
    if fmt not in FORMATS:
        raise ValueError(f"load_gptq: {CONFIG} 'checkpoint_format' is {fmt!r}; expected one of {sorted(FORMATS)}")
    group_size = config.get("group_size")
    if not isinstance(group_size, int) or isinstance(group_size, bool) or (group_size <= 0 and group_size != -1):
        raise ValueError(f"load_gptq: {CONFIG} 'group_size' must be a positive int or -1, got {group_size!r}")
    for key in ("desc_act", "sym"):
        if not isinstance(config.get(key, False), bool):
            raise ValueError(f"load_gptq: {CONFIG} {key!r} must be true or false, got {config.get(key)!r}")
    return config


def load_gptq(
    model: nn.Module, path: str | Path, *, dtype: torch.dtype | None = None, layout: str = "gptq"
) -> list[str]:
    """Load a GPTQ directory into ``model`` (built from its config on a real device): each ``nn.Linear``
    with a ``P.qweight`` in the checkpoint becomes a :class:`W4A16Linear` (in ``dtype``, default the
    Linear's if fp16/bf16, else fp16) and every other tensor is loaded by name. Returns the replaced
    module paths. ``layout="gptq"`` keeps the checkpoint's layout; ``"fragment"`` repacks each layer the
    fragment layout takes (``W4A16Linear``'s docstring; the others keep the GPTQ layout, with a warning naming
    them); ``"auto"`` gives each layer its ``preferred_layout()``, without a warning."""
    if layout not in LAYOUT_CHOICES:
        raise ValueError(f"load_gptq: layout must be one of {LAYOUT_CHOICES}, got {layout!r}")
    config = read_config(path)
    fmt, sym = FORMATS[config.get("checkpoint_format", "gptq")], bool(config.get("sym", True))
    file = Path(path) / WEIGHTS
    if not file.is_file():
        raise FileNotFoundError(f"load_gptq: no {WEIGHTS} in {path}")
    tensors = _safetensors().load_file(str(file))
    quantized = sorted({k[: -len(".qweight")] for k in tensors if k.endswith(".qweight")})
    replaced = []
    for p in quantized:
        parent_path, _, attr = p.rpartition(".")
        parent = model.get_submodule(parent_path) if parent_path else model
        linear = getattr(parent, attr, None)
        if not isinstance(linear, nn.Linear):
            raise ValueError(f"load_gptq: the checkpoint quantizes {p!r}, which is not an nn.Linear in the model")
        qweight = tensors.pop(f"{p}.qweight")
        if tuple(qweight.shape) != (linear.in_features // PACK, linear.out_features):
            raise ValueError(
                f"load_gptq: {p}.qweight is {list(qweight.shape)}, the model's Linear needs "
                f"[{linear.in_features // PACK}, {linear.out_features}]"
            )
        g_idx = tensors.pop(f"{p}.g_idx", None)
        if g_idx is not None and not config.get("desc_act", False):
            g_idx = None  # without act-order g_idx is arange // group_size, which the group size says
        own = linear.weight.dtype
        act_dtype = dtype or (own if own in (torch.float16, torch.bfloat16) else torch.float16)
        device = linear.weight.device
        layer = W4A16Linear.from_gptq(
            qweight.to(device), _to(tensors.pop(f"{p}.qzeros", None), device), tensors.pop(f"{p}.scales").to(device),
            _to(g_idx, device), _to(tensors.pop(f"{p}.bias", None), device), format=fmt, sym=sym, dtype=act_dtype,
            layout="auto" if layout == "auto" else "gptq",
        )  # fmt: skip
        if layout == "fragment":
            if reason := layer.fragment_unsupported():
                log.warning("load_gptq: %s keeps the GPTQ layout: the fragment layout %s", p, reason)
            else:
                layer.repack()
        setattr(parent, attr, layer)
        replaced.append(p)
    missing, unexpected = model.load_state_dict(tensors, strict=False)
    quantized_buffers = {f"{p}.{n}" for p in replaced for n in ("qweight", "scales", "zeros", "perm", "bias")}
    missing = [k for k in missing if k not in quantized_buffers]
    if unexpected or missing:
        raise ValueError(
            f"load_gptq: tensors not in the model {unexpected[:5]}; model tensors not in the checkpoint {missing[:5]}"
        )
    return replaced


def _to(t: torch.Tensor | None, device) -> torch.Tensor | None:
    return None if t is None else t.to(device)


__all__ = ["CONFIG", "PROJECTIONS", "WEIGHTS", "load_gptq", "read_config", "save_gptq"]

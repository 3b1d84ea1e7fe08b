"""Ahead-of-use compilation of the Triton specializations an op will need."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence

import torch

from exactfuse.registry import platform
from exactfuse.registry.library import direct_triton_launches
from exactfuse.registry.op import OPS, Op, get

log = logging.getLogger(__name__)


def warmup(
    ops: str | Op | Iterable[str | Op] | None = None,
    *,
    dtypes: Sequence[torch.dtype] = (torch.bfloat16,),
    device: str | torch.device = "cuda",
    **options,
) -> list[str]:
    """Compile every Triton specialization the given ops need, through their real launchers.

    ``ops``: op names or ops (default: all). ``options`` go to each op's warmup
    hook (e.g. ``widths=(4096, 14336)`` for the gated activations). Call it
    before CUDA-graph capture so that no JIT compile happens inside the capture.
    Returns the names of the ops warmed up.
    """
    if ops is None:
        selected = list(OPS.values())
    elif isinstance(ops, (str, Op)):
        selected = [ops if isinstance(ops, Op) else get(ops)]
    else:
        selected = [o if isinstance(o, Op) else get(o) for o in ops]
    device = torch.device(device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("exactfuse.warmup: device='cuda' but no CUDA GPU is available here (nothing to compile)")
    if device.type == "cpu" and not platform.interpreter_enabled():
        raise RuntimeError(
            "exactfuse.warmup: device='cpu' runs Triton only under the interpreter; set TRITON_INTERPRET=1 "
            "before importing triton, or warm up on a CUDA device"
        )
    warmed = []
    # The launch path of an eager call (Op.__call__): through wrap_triton's higher-order op a launch with
    # num_warps / num_stages becomes a one-config autotuner whose compile options differ, so its
    # specializations would not be the ones a call looks up.
    with direct_triton_launches():
        for op in selected:
            if op.warmup_fn is None:
                continue
            for dtype in dtypes:
                log.debug("warmup %s %s on %s", op.name, dtype, device)
                op.warmup_fn(device, dtype, **options)
            warmed.append(op.name)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    return warmed

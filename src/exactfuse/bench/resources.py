"""Registers, spills and shared memory of the Triton specializations a provider compiled.

Triton keeps compiled kernels per ``JITFunction``: ``device_caches[device][0]``
maps a specialization key to a ``CompiledKernel`` (Triton 3.2+), older
releases keep ``cache[device][key]``. A ``CompiledKernel`` has ``n_regs`` and
``n_spills`` once loaded and ``metadata.shared`` (bytes). Everything here is
defensive: an attribute a Triton version lacks yields ``None``, never an error.

The runner snapshots the caches of a provider's declared kernels before and
after the first call for a bench row; the specializations that appeared are
the ones that row compiled.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from dataclasses import asdict, dataclass

Snapshot = dict[tuple, object]


@dataclass
class KernelResources:
    """One compiled specialization: ``shared`` in bytes; None where Triton does not say."""

    name: str
    num_warps: int | None = None
    num_stages: int | None = None
    n_regs: int | None = None
    n_spills: int | None = None
    shared: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)

    def short(self) -> str:
        """``name: 32 regs, 0 spills, 0 B smem, 4 warps``."""
        fields = [
            f"{self.n_regs} regs" if self.n_regs is not None else None,
            f"{self.n_spills} spills" if self.n_spills is not None else None,
            f"{self.shared} B smem" if self.shared is not None else None,
            f"{self.num_warps} warps" if self.num_warps is not None else None,
        ]
        return f"{self.name}: " + ", ".join(f for f in fields if f)


def _jit_function(kernel: object) -> object:
    """Unwrap ``Autotuner`` / ``Heuristics`` (``.fn``) down to the ``JITFunction``."""
    seen = 0
    while not (hasattr(kernel, "device_caches") or hasattr(kernel, "cache")) and hasattr(kernel, "fn") and seen < 8:
        kernel = kernel.fn
        seen += 1
    return kernel


def _compiled_entries(kernel: object) -> Iterable[tuple[tuple, object]]:
    jit = _jit_function(kernel)
    caches = getattr(jit, "device_caches", None)
    if isinstance(caches, dict):
        for device, entry in list(caches.items()):
            table = entry[0] if isinstance(entry, (tuple, list)) and entry else entry
            if isinstance(table, dict):
                for key, compiled in list(table.items()):
                    yield (id(jit), device, key), compiled
        return
    legacy = getattr(jit, "cache", None)
    if isinstance(legacy, dict):
        for device, table in list(legacy.items()):
            if isinstance(table, dict):
                for key, compiled in list(table.items()):
                    yield (id(jit), device, key), compiled


def snapshot(kernels: Iterable[object]) -> Snapshot:
    """Every compiled specialization of ``kernels`` now, keyed by (function, device, key)."""
    found: Snapshot = {}
    for kernel in kernels:
        try:
            found.update(_compiled_entries(kernel))
        except Exception:  # an unknown Triton layout must not stop a benchmark
            continue
    return found


def _field(metadata: object, name: str):
    if isinstance(metadata, dict):
        return metadata.get(name)
    return getattr(metadata, name, None)


def _as_int(value) -> int | None:
    try:
        return None if value is None else int(value)
    except (TypeError, ValueError):
        return None


def describe(compiled: object) -> KernelResources | None:
    """Resources of one ``CompiledKernel`` (None for a pending or unknown entry)."""
    metadata = getattr(compiled, "metadata", None)
    if metadata is None:
        return None
    if getattr(compiled, "n_regs", None) is None and hasattr(compiled, "_init_handles"):
        with contextlib.suppress(Exception):
            compiled._init_handles()  # n_regs / n_spills are filled when the binary is loaded
    name = getattr(compiled, "name", None) or _field(metadata, "name") or "?"
    return KernelResources(
        name=str(name),
        num_warps=_as_int(_field(metadata, "num_warps")),
        num_stages=_as_int(_field(metadata, "num_stages")),
        n_regs=_as_int(getattr(compiled, "n_regs", None)),
        n_spills=_as_int(getattr(compiled, "n_spills", None)),
        shared=_as_int(_field(metadata, "shared")),
    )


def new_specializations(before: Snapshot, after: Snapshot) -> list[KernelResources]:
    """Resources of the specializations in ``after`` and not in ``before``."""
    out = []
    for key, compiled in after.items():
        if key not in before and (res := describe(compiled)) is not None:
            out.append(res)
    return out

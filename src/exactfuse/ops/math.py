"""Math functions for Triton kernels that must match eager PyTorch on CUDA.

On the GPU these are libdevice's ``expf``/``erff``/``tanhf``: the functions
ATen's CUDA kernels call (Triton's ``tl.exp`` is the approximate ``ex2.approx``
path and breaks bitwise parity). The Triton interpreter cannot call libdevice,
so under ``TRITON_INTERPRET=1`` they are numpy-backed stand-ins; results there
are checked against the CPU reference by a looser, declared contract.
"""

from __future__ import annotations

import triton
import triton.language as tl

from exactfuse.registry.platform import interpreter_enabled

if interpreter_enabled():

    @triton.jit
    def exp(x):
        return tl.exp(x)

    @triton.jit
    def erf(x):
        return tl.erf(x)

    @triton.jit
    def tanh(x):
        # |x| form avoids exp overflow; the interpreter only (see module docstring).
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)

else:
    from triton.language.extra import libdevice

    @triton.jit
    def exp(x):
        return libdevice.exp(x)

    @triton.jit
    def erf(x):
        return libdevice.erf(x)

    @triton.jit
    def tanh(x):
        return libdevice.tanh(x)

"""Math functions for Triton kernels that must match eager PyTorch on CUDA.

On the GPU these are the functions ATen's CUDA kernels call: libdevice's
``expf`` and ``tanhf`` (Triton's ``tl.exp`` is the approximate ``ex2.approx``
path and breaks bitwise parity), and ``erff`` as the CUDA toolkit that built
PyTorch evaluates it. CUDA 13.0 changed ``erff``: Triton 3.6 bundles an older
libdevice whose ``__nv_erff`` differs from it in 651,892 of 15M fp32 outputs
(H200, torch 2.11+cu130, scripts/gpu/probe_activation_math.py). For PyTorch
built with CUDA >= 13 we evaluate the CUDA 13.0 sequence (read from the PTX
``nvcc -arch=sm_90 -O3`` emits for ``erff``): a degree-6 polynomial in x^2
below |x| = 1.00296, else ``copysign(1 - 2^p(|x|), x)`` with ``ex2.approx.ftz``.

The Triton interpreter cannot call libdevice or inline PTX, so under
``TRITON_INTERPRET=1`` these are numpy-backed stand-ins; results there are
checked against the CPU reference by a looser, declared contract.

Kernels import these names unqualified (``from exactfuse.ops.math import
exact_exp``): Inductor re-emits user Triton kernels with the JIT functions
they reference by name, and cannot follow a module alias (``xm.exp``).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from exactfuse.registry.platform import interpreter_enabled

if interpreter_enabled():

    @triton.jit
    def exact_exp(x):
        return tl.exp(x)

    @triton.jit
    def exact_erf(x):
        return tl.erf(x)

    @triton.jit
    def exact_tanh(x):
        # |x| form avoids exp overflow; the interpreter only (see module docstring).
        e = tl.exp(-2.0 * tl.abs(x))
        t = (1.0 - e) / (1.0 + e)
        return tl.where(x < 0, -t, t)

else:
    from triton.language.extra import libdevice

    @triton.jit
    def exact_exp(x):
        return libdevice.exp(x)

    @triton.jit
    def exact_tanh(x):
        return libdevice.tanh(x)

    @triton.jit
    def _ex2_approx_ftz(x):
        return tl.inline_asm_elementwise(
            "ex2.approx.ftz.f32 $0, $1;", "=f,f", [x], dtype=tl.float32, is_pure=True, pack=1
        )

    @triton.jit
    def _erf_cuda13(x):
        """fp32 ``erff`` as CUDA 13.0 evaluates it (same constants, same fma chain)."""
        a = tl.abs(x)
        big = a >= 1.002959966659546
        t = tl.where(big, a, x * x)
        r = tl.where(big, 0.00011219871521461755, 8.483494457323104e-05)
        r = tl.fma(r, t, tl.where(big, -0.0013275252422317863, -0.0008213091641664505))
        r = tl.fma(r, t, tl.where(big, 0.00839653518050909, 0.005213488824665546))
        r = tl.fma(r, t, tl.where(big, -0.04024658352136612, -0.026868773624300957))
        r = tl.fma(r, t, tl.where(big, 0.15950430929660797, 0.11284004896879196))
        r = tl.fma(r, t, tl.where(big, 0.9129176735877991, -0.37612664699554443))
        r = tl.fma(r, t, tl.where(big, 0.6290600299835205, 0.12837915122509003))
        s = tl.where(big, -a, x)
        r = tl.fma(r, s, s)
        one_minus = 1.0 - _ex2_approx_ftz(r)
        return tl.where(big, tl.where(x < 0, -one_minus, one_minus), r)

    if int((torch.version.cuda or "0").split(".")[0]) >= 13:

        @triton.jit
        def exact_erf(x):
            return _erf_cuda13(x)

    else:  # PyTorch built with CUDA 12: libdevice's erff (parity not measured here)

        @triton.jit
        def exact_erf(x):
            return libdevice.erf(x)

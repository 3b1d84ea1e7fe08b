"""Nsight Compute of ``w4a16_gemm_packed`` (the fragment layout) beside ``w4a16_gemm`` and cuBLAS on the dense
weight, same weights (bf16, group 128, symmetric), at 4096 x 4096 and 4096 x 14336 and the M given (default
1 and 8)."""

from common import ncu_main
from ncu_w4a16_m1 import cases

from exactfuse.bench.peers.w4a16 import _w4a16_cublas_dense
from exactfuse.ops.w4a16 import fragment, w4a16_gemm, w4a16_gemm_packed


def calls() -> list:
    out = []
    for args, w in cases([1, 8]):
        p = fragment.pack(w.qweight, w.scales, w.zeros)
        out += [lambda a=args[0], p=p: w4a16_gemm_packed(a, p.words, p.scales), lambda args=args: w4a16_gemm(*args),
                _w4a16_cublas_dense(args, {})]  # fmt: skip
    return out


if __name__ == "__main__":
    ncu_main(calls)

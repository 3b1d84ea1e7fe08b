"""The fragment kernel (``w4a16_gemm_packed``'s Triton provider at ``fragment_config``'s launch) beside cuBLAS on the
dense weight, bf16, group 128, on four layers at M 1, 8 and 16, weights rotated past the L2, each output checked
against the op's contract first. One line a (layer, M), prefixed with LABEL: run it on two trees in one call
(``PYTHONPATH=<tree>/src:scripts/gpu python3 scripts/gpu/probe_w4a16_fragment_layers.py LABEL``) to compare a
kernel change side by side (sweeps/w4a16_fragment_pairs.txt)."""

import sys

import torch
from common import rotated, time_us

import exactfuse
from exactfuse.ops.w4a16 import dense_weight, fragment
from exactfuse.testing.cases.w4a16 import _random_prepared

LAYERS = ((4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192))  # (K, N)


def main() -> None:
    label = sys.argv[1] if len(sys.argv) > 1 else "fragment"
    op = exactfuse.get("w4a16_gemm_packed")
    for K, N in LAYERS:
        ws = rotated(lambda K=K, N=N: _random_prepared(K, N, torch.bfloat16, "cuda"), K * N // 2)
        packed = [fragment.pack(w.qweight, w.scales, w.zeros) for w in ws]
        dense = [dense_weight(w.qweight, w.scales, None, None, 128, torch.bfloat16) for w in ws]
        for M in (1, 8, 16):
            a = torch.randn((M, K), dtype=torch.bfloat16, device="cuda")
            args = (a, packed[0].words, packed[0].scales)
            with op.priority(["triton"]):
                res = op.contract.check(op(*args), op.native(*args), args=args, kwargs={})
                assert res.passed, f"{K}x{N} M{M}: {res.summary()}"
                t = time_us(lambda a=a, ps=packed: [op(a, p.words, p.scales) for p in ps], len(packed))
            cublas = time_us(lambda a=a, ds=dense: [a @ d for d in ds], len(dense))
            print(f"{label} {K}x{N} M{M}: fragment {t:.2f} us, cuBLAS {cublas:.2f} us, {cublas / t:.2f}x", flush=True)
        ws = packed = dense = None
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

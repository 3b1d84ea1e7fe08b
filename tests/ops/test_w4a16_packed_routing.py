"""Which of ``w4a16_gemm_packed``'s kernels runs: the wgmma kernel's rule (``heuristics.packed_wgmma_config``),
the gate on its pipelined consumer (``packed.pipelining_unsafe``) and the provider's dispatch among the mma.sync
kernel, the wgmma kernel and the dense path; no GPU needed."""

from __future__ import annotations

import pytest
import torch

from exactfuse.ops.w4a16 import fragment
from exactfuse.ops.w4a16.packing import random_weights


def _packed(K: int, N: int):
    """A ``K x N`` layer (group 128, zero points) in the fragment layout: words, scales, zero words, perm."""
    w = random_weights(K, N, torch.float16, "cpu", torch.Generator().manual_seed(0), symmetric=False)
    return fragment.pack(w.qweight, w.scales, w.zeros)


@pytest.mark.parametrize("K, N", [(4096, 4096), (4096, 8192), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 6144)])
def test_wgmma_rule_takes_33_to_128_rows_of_large_layers_as_the_launcher_needs(K, N):
    """``packed_wgmma_config``: the wgmma kernel for 33-128 rows of layers of at least 2^25 weights (4096 x
    8192 up; not 4096² or 4096 x 6144), its 64-row tile up to 64 rows and its 128-row tile above, each tiling
    the layer as ``launch_packed_wgmma`` needs; None elsewhere (the mma.sync kernel's tile)."""
    from exactfuse.ops.w4a16.heuristics import PACKED_WGMMA_TILES, packed_wgmma_config

    for M in (1, 16, 32, 33, 64, 65, 128, 129):
        cfg = packed_wgmma_config(M, N, K, K // 128)
        if not 33 <= M <= 128 or K * N < 2**25:
            assert cfg is None, (M, cfg)
            continue
        tile = (cfg["rows"], cfg["tiles"], cfg["stages"], cfg["warps"], cfg["groups"])
        assert tile == PACKED_WGMMA_TILES[64 if M <= 64 else 128]
        assert (N // 16) % (cfg["tiles"] * cfg["warps"] * cfg["groups"]) == 0
        assert (K // 64 // (K // 128)) % cfg["unroll"] == 0


def test_pipelined_wgmma_consumer_is_refused_under_a_ptxas_that_reuses_its_operand_registers(monkeypatch):
    """``packed.pipelining_unsafe``: the pipelined consumer only under Triton's sm_90 ptxas 13.3 or later (older
    ones may hand an in-flight wgmma's A registers to the next step's dequantization); ``launch_packed_wgmma``
    refuses ``pipelined=True`` naming the argument and the version, before it touches the tensors."""
    pytest.importorskip("triton.backends.nvidia.compiler")
    import triton.backends.nvidia.compiler as nvidia

    from exactfuse.ops.w4a16 import packed

    for version, unsafe in (("12.8", True), ("12.9", True), ("13.3", False), ("13.4", False)):
        monkeypatch.setattr(nvidia, "get_ptxas", lambda arch, v=version: type("Tool", (), {"version": v})())
        packed.pipelining_unsafe.cache_clear()
        reason = packed.pipelining_unsafe()
        assert bool(reason) == unsafe and (not unsafe or version in reason), (version, reason)
        if unsafe:
            with pytest.raises(ValueError, match=f"pipelined=True: .*{version}"):
                packed.launch_packed_wgmma(None, None, None, None, None, None, tiles=2, rows=64, unroll=2, stages=6,
                                           pipelined=True)  # fmt: skip
    packed.pipelining_unsafe.cache_clear()


def test_provider_routes_up_to_128_rows_to_the_kernel(monkeypatch):
    """``w4a16_gemm_packed``'s provider: the mma.sync kernel at 1-128 rows (its 4-block tile from 17) on a layer
    it tiles, the wgmma kernel at 33-128 rows where ``packed_wgmma_config`` takes the layer, the dense path
    above 128 rows and for a layer whose N is not a multiple of 64."""
    pytest.importorskip("triton.experimental.gluon")
    from exactfuse.ops.w4a16 import heuristics, packed

    taken = []
    monkeypatch.setattr(packed, "launch_packed", lambda a, *args, **cfg: taken.append(("kernel", cfg["blocks"])))
    monkeypatch.setattr(packed, "launch_packed_wgmma", lambda a, *args, **cfg: taken.append(("wgmma", cfg["rows"])))
    monkeypatch.setattr(packed, "packed_dense_gemm", lambda a, *args: taken.append(("dense", a.shape[0])))
    for N in (256, 48):
        words, scales, zeros, _ = _packed(256, N)
        for M in (1, 16, 17, 128, 129):
            packed.w4a16_gemm_packed_gluon(torch.zeros(M, 256, dtype=torch.float16), words, scales, zeros)
    assert taken == [("kernel", 1), ("kernel", 2), ("kernel", 4), ("kernel", 4), ("dense", 129)] + [
        ("dense", M) for M in (1, 16, 17, 128, 129)
    ]
    # a layer as large as the wgmma kernel's rule takes (its threshold lowered to this 256 x 256 one)
    monkeypatch.setattr(heuristics, "PACKED_WGMMA_MIN_WEIGHTS", 256 * 256)
    taken.clear()
    words, scales, zeros, _ = _packed(256, 256)
    for M in (32, 33, 64, 65, 128, 129):
        packed.w4a16_gemm_packed_gluon(torch.zeros(M, 256, dtype=torch.float16), words, scales, zeros)
    assert taken == [("kernel", 4), ("wgmma", 64), ("wgmma", 64), ("wgmma", 128), ("wgmma", 128), ("dense", 129)]

"""w4a16_gemm's launch heuristic on the CPU: buckets by M and dtype, split-K counts for the H200."""

import pytest

from exactfuse.ops.w4a16.heuristics import BUCKETS, H200_SMS, bucket_config, dense_config, select_config
from exactfuse.utils import next_power_of_2

GEMV_MAX_M = next(b.max_m for b in BUCKETS if b.name == "gemv")


def test_decode_splits_k_to_fill_the_h200():
    for K, N in [(4096, 4096), (14336, 4096), (8192, 8192)]:
        for M in (1, 2, 3, 4, 8, 16):
            cfg = select_config(M, N, K, 128, H200_SMS)
            programs = -(-N // cfg.BN) * cfg.split_k
            if M <= GEMV_MAX_M:
                assert (cfg.name, cfg.gemv, cfg.BM) == ("gemv1" if M == 1 else "gemv", True, next_power_of_2(M))
            else:
                assert cfg.name == "decode" and cfg.BM == 16 and not cfg.gemv
            assert cfg.split_k > 1 and programs >= H200_SMS, (M, K, N, cfg)
            assert cfg.k_per_split % cfg.BK == 0 and (cfg.split_k - 1) * cfg.k_per_split < K  # no empty split


def test_split_rule_by_programs_per_sm_and_dense_above_m128():
    # decode aims at 4 programs per SM in one wave: 64 column tiles of 64 for N = 4096 split 528 // 64 = 8
    # ways, not 9 (H200, K = 14336, M = 1: 26.0 µs at S8, 27.5 at S9); 448 tiles (N = 28672) are >= 2 per
    # SM: no split. m32 aims at 2 per SM: 224 tiles (N = 14336) do not split
    assert bucket_config("decode", 1, 4096, 14336).split_k == 8
    assert bucket_config("decode", 1, 28672, 4096).split_k == 1
    assert select_config(32, 14336, 4096, 128).split_k == 1
    # split-K sums in the GEMM's launch for decode only (0.97x the time at M <= 4, 1.15-1.19x at M 64-128)
    assert select_config(1, 4096, 4096, 128).fixup and not select_config(64, 4096, 4096, 128).fixup
    for M in (129, 1024, 4096):
        cfg = select_config(M, 4096, 4096, 128)
        assert cfg == dense_config() and cfg.dense and cfg.split_k == 1
    names = [select_config(M, 4096, 4096, 128).name for M in (1, 2, 3, 16, 17, 32, 33, 64, 65, 128, 129, 512)]
    assert names == ["gemv1", "gemv", "decode", "decode", "m32", "m32", "m64", "m64", "m128", "m128", "dense", "dense"]
    with pytest.raises(ValueError, match="M <= 2"):
        bucket_config("gemv", 3, 4096, 4096)
    with pytest.raises(ValueError, match="gemv1 bucket takes M <= 1"):
        bucket_config("gemv1", 2, 4096, 4096)
    # gemv1 aims at 16 programs per SM in one wave: K = 14336 at N = 4096 splits 28 ways (above the decode
    # bucket's 16; the gemv1 tile sweep measured that split)
    assert [bucket_config("gemv1", 1, N, K).split_k for K, N in ((14336, 4096), (4096, 28672))] == [28, 4]

"""``w4a16_gemm_packed``'s kernels without a GPU: compiled for sm_90a at every configuration the launch rules take
and at the GPU tests' (``test_w4a16_packed_kernel.py``), their SASS read for what the kernels rely on, and the
shared-memory view of the zero points."""

from __future__ import annotations

import itertools
import re

import pytest

from exactfuse.ops.w4a16.heuristics import packed_config, packed_wgmma_config
from support.w4a16 import PINGPONG_CONFIGS, WGMMA_CONFIGS


def test_zero_point_view_reads_each_row_of_a_slot_at_its_padded_stride():
    """``packed_smem.zeros_view``: a slot's zero-point rows are at least 128 bytes (32 words; a TMA
    destination's alignment), each holding the CTA's ``2 W T`` words first. Coordinate ``(w, t, row, k)``
    is word ``k + 2 t + 2 T w`` of row ``row``, also below 16 tiles a CTA where a step spans several groups'
    rows (unroll 4 over groups of 2 chunks), and the padding aliases those words."""
    pytest.importorskip("triton.experimental.gluon")
    from exactfuse.ops.w4a16.packed_smem import zeros_view

    for warps, tiles, units in ((4, 1, 4), (4, 2, 4), (8, 2, 2), (4, 4, 4), (8, 4, 1)):
        bases = zeros_view(warps, tiles, units).offset_bases
        row = max(2 * warps * tiles, 32)
        assert len(bases) == (row * units).bit_length() - 1  # the offsets span the slot's rows

        for offset in range(row * units):
            r, word = divmod(offset, row)
            word %= 2 * warps * tiles  # the padding: the same coordinates as the row's first words
            w, rest = divmod(word, 2 * tiles)
            t, k = divmod(rest, 2)
            assert _coordinate(bases, offset) == (w, 0, 0, t, r, k), (warps, tiles, units, offset)


def _coordinate(bases: list[list[int]], offset: int) -> tuple:
    """A shared linear layout's coordinate of ``offset``: the XOR of the bases of its set bits."""
    out = [0] * len(bases[0])
    for bit, basis in enumerate(bases):
        if offset >> bit & 1:
            out = [a ^ b for a, b in zip(out, basis, strict=True)]
    return tuple(out)


def compile_rule_configs() -> list[str]:
    """The kernel compiled for sm_90a at every configuration ``packed_config`` takes on the bench layers at M
    1-128 in bf16 (M = 1 in fp16), with and without zero points, plain and as a programmatic dependent launch
    (the provider launches both), and at the probe's variants (two CTAs an SM, 8 consumer warps); the
    failures."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import offline_packed_sass

    layers = [(4096, 4096), (4096, 14336), (14336, 4096), (8192, 8192), (4096, 28672)]
    picked = set()
    for (K, N), M in itertools.product(layers, (1, 8, 16, 32, 64, 128)):
        cfg = packed_config(M, N, K, K // 128)
        for pdl in (False, True):
            picked.add(("bf16", "{blocks}x{tiles}u{unroll}s{stages}".format(**cfg), 4, 1, pdl))
            if M == 1:
                picked.add(("fp16", "{blocks}x{tiles}u{unroll}s{stages}".format(**cfg), 4, 1, pdl))
    picked |= {("bf16", "2x1u2s4", 4, 2, False), ("bf16", "1x1u2s4", 8, 1, False)}
    lines = [
        offline_packed_sass.compile_ws(config, dtype, warps, per_sm, pdl, zeros)
        for (dtype, config, warps, per_sm, pdl), zeros in itertools.product(sorted(picked), (True, False))
    ]
    lines += [offline_packed_sass.compile_ws(c, "bf16", 4, 1, False, zeros, True) for c in ("1x2u2s6", "2x2u2s6")
              for zeros in (True, False)]  # fmt: skip
    return [line for line in lines if " regs " not in line or " 0.00 a word" in line] + compile_wgmma_configs()


def compile_wgmma_configs() -> list[str]:
    """The wgmma kernel at the GPU test's configurations and with two consumer partitions, both dtypes, with and
    without zero points, and at the tiles the op routes to as it launches them (programmatic dependent
    launches); the failures, any whose stream-K sum loads a piece's partials more often than its tile needs
    (16-byte loads: the tile's ``BM x 16 W T`` fp32 over the partition's threads, for each of the 3 pieces
    compiled; a layout wider than the tile repeats them), any whose consumer loop moves data to build the A
    operand (a PRMT past the scale records' one a tile and chunk, or a SHFL), and any two-partition one whose
    partitions' step loops do not each hold their wgmmas."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import offline_packed_sass

    bad = []
    configs = [(*c, False) for c in WGMMA_CONFIGS if c[3] == 1] + [(c, 4, False, 2, False) for c in PINGPONG_CONFIGS]
    for M in (64, 128):  # the op's two wgmma tiles, as it launches them
        cfg = packed_wgmma_config(M, 14336, 4096, 32)
        configs.append(("{rows}x{tiles}u{unroll}s{stages}".format(**cfg), cfg["warps"], False, cfg["groups"], True))
    for (config, warps, pipelined, groups, pdl), dtype, zeros in itertools.product(
        configs, ("bf16", "fp16"), (True, False)
    ):
        line = offline_packed_sass.compile_wgmma(config, dtype, warps, zeros, pipelined, groups, pdl)
        _, tiles, unroll, _ = (int(v) for v in re.fullmatch(r"(\d+)x(\d+)u(\d+)s(\d+)", config).groups())
        counts = dict(re.findall(r"(HGMMA|PRMT|SHFL) (\d+)", line))
        each = re.search(r"partitions' loops: HGMMA ([\d, ]+)", line)
        if " regs" not in line:
            bad.append(line)
        elif int(counts["HGMMA"]) != 4 * tiles * unroll or int(counts["PRMT"]) > tiles * unroll or int(counts["SHFL"]):
            bad.append(line)  # four k-steps a tile and chunk, the operand's registers as dequantized
        elif groups > 1 and (each is None or each.group(1) != ", ".join([str(4 * tiles * unroll)] * groups)):
            bad.append(line)  # each consumer partition's step loop its own wgmmas
        elif int(re.search(r"LDG\.E\.128 (\d+)", line).group(1)) != groups * 3 * int(config.split("x")[0]) * tiles // 8:
            bad.append(line)  # BM x 16 W T values over 32 W threads, 4 a load, 3 pieces, each partition
    return bad + pipelined_wgmma_keeps_its_operands()


def pipelined_wgmma_keeps_its_operands() -> list[str]:
    """Where ``packed.pipelining_unsafe`` lets the pipelined consumer run (this Triton's sm_90 ptxas is 13.3 or
    later), its step loop writes no register that an in-flight wgmma reads as its A operand; the lines that
    do. Under an older ptxas the kernel refuses it, and nothing is asserted."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
    import offline_packed_sass

    from exactfuse.ops.w4a16.packed import pipelining_unsafe

    if pipelining_unsafe():
        return []
    configs = (("64x2u2s6", 4), ("128x1u2s4", 8))
    lines = [offline_packed_sass.compile_wgmma(config, "bf16", warps, True, True) for config, warps in configs]
    return [line for line in lines if " 0 writes of their A registers" not in line]


def test_kernel_compiles_for_sm90_at_every_configuration_the_rule_takes():
    """Without a GPU: a change that breaks the Gluon kernel's compile fails here, not first on the device."""
    from exactfuse.testing.offline import run_in_child

    ok, said = run_in_child(__file__, "compile_rule_configs")
    assert ok, said

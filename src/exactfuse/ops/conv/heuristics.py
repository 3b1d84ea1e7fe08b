"""Launch rule of the conv family: channels per program and warps, from model constants only.

The rule reads ``C``, the state window ``SL + SQL - 1`` and the mode (a string), never a row, request
or slot count, so one compiled kernel serves every batch size and the launcher adds no guard on a
symbolic size under torch.compile.
"""

from __future__ import annotations

from dataclasses import dataclass

from exactfuse.utils import next_power_of_2

# Elements of the write-back kernel's [window, channels] state tile (spec, prefill): 4096 keeps a
# 12-position window (K = 5, D = 3) at 256 channels, 32 values a thread at 4 warps.
STATE_TILE_ELEMENTS = 4096
# The row kernel's output tile (spec rows, and prefill rows with a token map or seq_idx), which holds no state:
# TILE_ROWS x TILE_CHANNELS = 2048 values, 16 a thread at 4 warps, each tap's rows read as 256-byte channel runs;
# a program's rows share one search of query_start_loc and its weights, and neighbouring rows' taps overlap in
# the L1. 16 x 128 at 4 warps: 1.16x the 32 x 128 tile, geomean of five prefill shapes (sweeps/conv_tiles.txt).
TILE_ROWS = 16
TILE_CHANNELS = 128
NUM_WARPS = 4
# The lean prefill kernel's tile (prefill without a token map or seq_idx): PREFILL_TILE_ROWS x
# PREFILL_TILE_CHANNELS at NUM_WARPS, its rows one run over a register window of PREFILL_TILE_UNROLL rows
# (ConvConfig.unroll), where the window is at most PREFILL_TILE_WINDOW_MAX positions (K = 4, D = 1: what was
# swept); longer windows (short_conv's 9) keep the row kernel's tile. 8 x 256 in one run of 8: 1.18x the
# 16 x 128 tile in runs of 1, geomean of five causal_conv1d prefill shapes on an H100 (h100/sweeps/conv_tiles.txt).
PREFILL_TILE_ROWS = 8
PREFILL_TILE_CHANNELS = 256
PREFILL_TILE_UNROLL = 8
PREFILL_TILE_WINDOW_MAX = 3
# Decode without a register window (windows longer than DECODE_WINDOW_TILE_MAX positions): one warp over 128
# channels ([slot, W, C] storage) or 64 ([slot, C, W]), at most DECODE_TILE_ELEMENTS state values a program.
DECODE_CHANNELS_CONTIGUOUS = 128
DECODE_CHANNELS_STRIDED = 64
DECODE_TILE_ELEMENTS = 2048
DECODE_WARPS = 1
# Decode with the slot's window held in registers (ConvConfig.window_tile), loaded once as a [BC, BW] tile and
# shifted there. [slot, C, W] storage: one channel a thread, DECODE_WINDOW_TILE_ELEMENTS state values a program
# (256 channels over 8 warps at K = 4, 64 over 2 at short_conv's window of 9); [slot, W, C]: one warp over
# DECODE_WINDOW_TILE_CONTIGUOUS channels. Over the shipped rules before it: 1.16x geomean on FLA's [B, C, K],
# 1.2-1.4x on the [slots, C, K - 1] cache, 1.01x on short_conv's [C, W] slots, 1.09x on [W, C]
# (sweeps/conv_update_decode.txt, sweeps/conv_decode.txt).
DECODE_WINDOW_TILE_ELEMENTS = 1024
DECODE_WINDOW_TILE_CONTIGUOUS = 256
DECODE_WINDOW_TILE_MAX = 16  # window positions the register window takes (slots.window_columns' tuple)
# Decode rows a program (ConvConfig.BT), one after another: 1, the fastest geomean over the update's batches 1-1024
# (4 and 8 rows win at B >= 256 and lose at B <= 64: sweeps/conv_update_decode_rows.txt).
DECODE_ROWS = 1
# Dense [slot, C, W] slots whose window is no power of two above SCALAR_WINDOW_MAX positions (short_conv's cw, 9):
# the flat run (ConvConfig.flat_window), DECODE_FLAT_CHANNELS channels over DECODE_FLAT_WARPS warps. Timed at 9
# positions, bf16: 1.25x geomean over the register window at 64/2 on R 1-1024, 97-104% of the roofline at
# R >= 256 against 70-72% (sweeps/conv_decode_flat_rows.txt).
DECODE_FLAT_CHANNELS = 128
DECODE_FLAT_WARPS = 1
# [slot, C, W] windows whose channel stride gives no vector access take the register window one [BC] vector a
# position (SCALAR_WINDOW) up to this many positions; each position is a warp access of 2-byte elements a stride
# apart. bf16, against the [BW, BC] tile: slot cache (3 positions) B = 1024 0.81x its time, short_conv cw
# (9 positions) R = 256 2.98x (docs/heuristics.md, "conv decode"; benchmarks/results/h200/short_conv.csv).
SCALAR_WINDOW_MAX = 4


@dataclass(frozen=True)
class ConvConfig:
    """``BT`` rows x ``BC`` channels per program of the row kernel, ``BC_STATE`` channels of the
    write-back kernel, ``BW`` window positions (a power of two >= ``SL + SQL - 1``), the warps of both,
    and ``unroll``."""

    BT: int
    BC: int
    BC_STATE: int
    BW: int
    num_warps: int
    unroll: int = 1  # rows a register window serves: the lean prefill kernel's, else the row kernel's (UNROLL)
    lean: bool = True  # prefill: lean.conv_lean_kernel, then the row kernel on the tiles it leaves (FIXUP)
    window_tile: bool = False  # decode: the slot's window held in registers (the row kernel's WINDOW_TILE)
    channels_first: bool = False  # decode: consecutive programs take one row's channel blocks (CHANNELS_FIRST)
    flat_window: bool = False  # decode over dense [C, W] slots: the block's windows as one flat run (FLAT_WINDOW)

    def __post_init__(self):
        if self.unroll < 1 or self.unroll & (self.unroll - 1) or self.BT % self.unroll:
            raise ValueError(f"unroll must be a power of two dividing BT = {self.BT}, got {self.unroll}")


def conv_config(
    C: int, window: int, mode: str, channels_contiguous: bool = False, dense_windows: bool = False, lean: bool = True
) -> ConvConfig:
    """Static launch parameters for ``C`` channels and a written window of ``window`` positions;
    ``channels_contiguous``: the state's channel stride is 1 (``[slot, W, C]`` storage); ``dense_windows``: the
    window stride is 1 and the channel stride ``window`` (dense ``[slot, C, W]`` slots); both cache constants;
    ``lean``: prefill rows take the lean kernel (no token map, no ``seq_idx``; the launcher's choice).

    Decode rows (one a program here; ``BT`` rows a program run one after another) also shift their state
    window. Windows of at most :data:`DECODE_WINDOW_TILE_MAX` positions are held in registers
    (``window_tile``): over ``[slot, C, W]`` storage one channel a thread, :data:`DECODE_WINDOW_TILE_ELEMENTS`
    state values a program; over ``[slot, W, C]`` one warp over :data:`DECODE_WINDOW_TILE_CONTIGUOUS`
    channels. Dense ``[slot, C, W]`` windows of more than :data:`SCALAR_WINDOW_MAX` positions and no power of
    two, where :data:`DECODE_FLAT_CHANNELS` divides ``C``, move as one flat run (``flat_window``) of that many
    channels over :data:`DECODE_FLAT_WARPS` warps. Longer windows take one warp over
    :data:`DECODE_CHANNELS_CONTIGUOUS` or :data:`DECODE_CHANNELS_STRIDED` channels, at most
    :data:`DECODE_TILE_ELEMENTS` state values a program.
    Spec and prefill rows hold only ``K`` taps: the lean prefill kernel takes the :data:`PREFILL_TILE_ROWS` x
    :data:`PREFILL_TILE_CHANNELS` tile in runs of :data:`PREFILL_TILE_UNROLL` rows up to a window of
    :data:`PREFILL_TILE_WINDOW_MAX` positions, else (and the row kernel) the :data:`TILE_ROWS` x
    :data:`TILE_CHANNELS` tile; their write-back kernel a ``[BW, BC_STATE]`` state tile.
    All from ``scripts/gpu/sweep_conv.py``.
    """
    BW = next_power_of_2(max(window, 1))
    c_block = next_power_of_2(max(C, 1))
    BC_STATE = max(16, min(c_block, STATE_TILE_ELEMENTS // BW, 1024))
    if mode == "decode":
        if BW <= DECODE_WINDOW_TILE_MAX:
            BC = max(16, min(c_block, DECODE_FLAT_CHANNELS))
            flat = not channels_contiguous and dense_windows and SCALAR_WINDOW_MAX < window < BW and C % BC == 0
            if flat:  # window_tile too: the register window where the launcher finds the run not dense
                return ConvConfig(BT=DECODE_ROWS, BC=BC, BC_STATE=BC_STATE, BW=BW, num_warps=DECODE_FLAT_WARPS,
                                  window_tile=True, flat_window=True)  # fmt: skip
            if channels_contiguous:
                BC, warps = max(16, min(c_block, DECODE_WINDOW_TILE_CONTIGUOUS)), 1
            else:
                BC = max(16, min(c_block, DECODE_WINDOW_TILE_ELEMENTS // BW))
                warps = max(1, BC // 32)
            return ConvConfig(BT=DECODE_ROWS, BC=BC, BC_STATE=BC_STATE, BW=BW, num_warps=warps, window_tile=True)
        want = DECODE_CHANNELS_CONTIGUOUS if channels_contiguous else DECODE_CHANNELS_STRIDED
        BC = max(16, min(c_block, want, DECODE_TILE_ELEMENTS // BW))
        return ConvConfig(BT=1, BC=BC, BC_STATE=BC_STATE, BW=BW, num_warps=DECODE_WARPS)
    if mode == "prefill" and lean and window <= PREFILL_TILE_WINDOW_MAX:
        BC = max(16, min(c_block, PREFILL_TILE_CHANNELS))
        return ConvConfig(BT=PREFILL_TILE_ROWS, BC=BC, BC_STATE=BC_STATE, BW=BW, num_warps=NUM_WARPS,
                          unroll=PREFILL_TILE_UNROLL)  # fmt: skip
    BC = max(16, min(c_block, TILE_CHANNELS))
    return ConvConfig(BT=TILE_ROWS, BC=BC, BC_STATE=BC_STATE, BW=BW, num_warps=NUM_WARPS, lean=lean)


# The backward's row kernel: BT x BC tiles, STEPS of them down the rows a program (its weight and bias
# gradient sums stay in registers across the steps and are reduced over the rows once); the dx kernel:
# DX_BT x DX_BC tiles. Row kernel 32 x 64, 8 steps, 4 warps: 1.08x the 16 x 128 x 16-step tile, dx 64 x 64:
# 1.0-1.5x the other tiles tried (sweeps/conv_backward_probe.txt).
GRAD_TILE_ROWS = 32
GRAD_TILE_CHANNELS = 64
GRAD_STEPS = 8
GRAD_WARPS = 4
GRAD_X_TILE_ROWS = 64
GRAD_X_TILE_CHANNELS = 64
GRAD_X_WARPS = 4


@dataclass(frozen=True)
class GradConfig:
    """Launch parameters of ``causal_conv1d_fn_backward``'s two kernels: the row kernel's ``BT`` x ``BC``
    tile, ``steps`` tiles down the rows a program, ``num_warps``; the dx kernel's ``DX_BT`` x ``DX_BC`` tile
    and ``dx_warps``."""

    BT: int
    BC: int
    steps: int
    num_warps: int
    DX_BT: int
    DX_BC: int
    dx_warps: int


def conv_grad_config(C: int) -> GradConfig:
    """The backward's tiles for ``C`` channels (a model constant), channel blocks capped at ``C``'s power
    of two."""
    c_block = next_power_of_2(max(C, 1))
    return GradConfig(
        BT=GRAD_TILE_ROWS, BC=max(16, min(c_block, GRAD_TILE_CHANNELS)), steps=GRAD_STEPS, num_warps=GRAD_WARPS,
        DX_BT=GRAD_X_TILE_ROWS, DX_BC=max(16, min(c_block, GRAD_X_TILE_CHANNELS)), dx_warps=GRAD_X_WARPS,
    )  # fmt: skip

"""The conv family's launch rule (``ops/conv/heuristics.conv_config``): tiles, warps and window paths from model
and cache constants only."""

from exactfuse.ops.conv.heuristics import conv_config


def test_heuristic_depends_on_model_constants_only():
    # windows of at most 16 positions are held in registers: over [slot, C, W] one channel a thread, 1024 state
    # values a program; over [slot, W, C] one warp over 256 channels
    cfg = conv_config(10240, 9, "decode")
    assert (cfg.BT, cfg.BC, cfg.BW, cfg.BC_STATE, cfg.num_warps, cfg.window_tile) == (1, 64, 16, 256, 2, True)
    assert not cfg.flat_window
    # dense [slot, C, W] slots whose window is no power of two above 4 positions: the flat run, 128 channels a warp
    flat = conv_config(10240, 9, "decode", dense_windows=True)
    assert (flat.BT, flat.BC, flat.BW, flat.num_warps) == (1, 128, 16, 1) and flat.flat_window and flat.window_tile
    assert conv_config(10240, 16, "decode", dense_windows=True) == conv_config(10240, 16, "decode")  # vector rows
    assert conv_config(10240, 3, "decode", dense_windows=True) == conv_config(10240, 3, "decode")  # scalar window
    assert not conv_config(10200, 9, "decode", dense_windows=True).flat_window  # 128 channels do not divide C
    assert not conv_config(10240, 9, "decode", channels_contiguous=True, dense_windows=True).flat_window
    fla = conv_config(10240, 4, "decode")
    assert (fla.BC, fla.num_warps, fla.window_tile) == (256, 8, True)
    wc = conv_config(10240, 9, "decode", channels_contiguous=True)
    assert (wc.BC, wc.num_warps, wc.window_tile) == (256, 1, True)
    # longer windows: one warp, at most 2048 state values a program
    long = conv_config(10240, 20, "decode", channels_contiguous=True)
    assert (long.BC, long.num_warps, long.window_tile) == (64, 1, False)
    assert conv_config(10240, 20, "decode").BC == 64
    lean, rows = conv_config(10240, 3, "prefill"), conv_config(10240, 3, "prefill", lean=False)
    assert (lean.BT, lean.BC, lean.unroll, lean.lean) == (8, 256, 8, True)  # the lean kernel's tile, one run of 8
    assert (rows.BT, rows.BC, rows.unroll, rows.lean) == (16, 128, 1, False)  # token map / seq_idx: the row kernel
    wide = conv_config(10240, 9, "prefill")  # short_conv's window of 9: the 16 x 128 tile, lean
    assert (wide.BT, wide.BC, wide.unroll, wide.lean) == (16, 128, 1, True)
    assert conv_config(200, 12, "spec").BC == 128 and conv_config(200, 12, "spec").BC_STATE == 256
    assert conv_config(7, 1, "decode").BC == 16 and conv_config(7, 1, "prefill").BC == 16
    assert conv_config(7, 1, "decode").num_warps == 1

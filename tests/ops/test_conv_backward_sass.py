"""causal_conv1d_fn_backward's kernels compiled for sm_90 on the CPU (``exactfuse.testing.offline``) under the
launcher's specializations, which the interpreter does not compile: 16-bit weights read as one word a channel
or as a ``[BC, KW]`` tile, fp32 weights, initial states and ``seq_idx``.

At the shipped tiles the row kernel's step loop holds at most the barriers of one move of the rows' facts to
the tile's layout, and the dx kernel at most one barrier. Each barrier holds a program's warps in step, so
that one warp's loads cannot overlap another's arithmetic; a tap's mask moved through shared memory once a
tap, and the taps loaded a second time in a ``[BT, KP, BC]`` layout for the weight gradient, put 16 in the
loop (12 under Triton 3.9)."""

from exactfuse.testing.offline import run_in_child

ROW_TYPES = {n: "*bf16" for n in ("p_g", "p_x", "p_w", "p_b", "p_init", "p_dconv")}
ROW_TYPES |= {"p_qsl": "*i32", "p_seq": "*i32", "p_dw": "*fp32", "p_db": "*fp32"}
DX_TYPES = {"p_dconv": "*bf16", "p_w": "*bf16", "p_qsl": "*i32", "p_seq": "*i32", "p_dx": "*bf16"}
ROW_BASE = dict(K=4, D=1, HAS_BIAS=True, ACT=0, HAS_SEQ_IDX=False, HAS_INIT=False, W_ALIGN=4, W_WORD=4)
# (label, types changed, constexprs changed, whether the loop's barriers are held to one move)
ROW_VARIANTS = [
    ("bf16 word", {}, {}, True),
    ("bf16 tile", {}, dict(W_WORD=0), True),
    ("bf16 K3 D2", {}, dict(K=3, D=2, W_WORD=0, W_ALIGN=1), True),
    ("fp32 weights init seq_idx", {"p_w": "*fp32", "p_b": "*fp32", "p_dconv": "*fp32"},
     dict(W_WORD=0, HAS_INIT=True, HAS_SEQ_IDX=True), False),
    ("fp16 plain", {n: "*fp16" for n in ("p_g", "p_x", "p_w", "p_init", "p_dconv")}, dict(HAS_BIAS=False, ACT=-1),
     True),
]  # fmt: skip
LOOP_BARRIERS = 2  # one move of the rows' first rows: stored, a barrier, read back, a barrier before the next


def compile_all() -> list[str]:
    """Every variant; the failures as ``label: error``."""
    from exactfuse.ops.conv.grad_kernels import conv_grad_rows_kernel, conv_grad_x_kernel
    from exactfuse.ops.conv.heuristics import conv_grad_config
    from exactfuse.testing.offline import compile_error, compile_offline, every_int_constant, loop_barriers, sass

    cfg = conv_grad_config(10240)
    failures = []
    for label, types, consts, held in ROW_VARIANTS:
        types = ROW_TYPES | types
        consts = ROW_BASE | dict(BT=cfg.BT, BC=cfg.BC, STEPS=cfg.steps) | consts
        div16 = [*types, "stride_g", "stride_x", "C"]
        try:
            kernel = compile_offline(conv_grad_rows_kernel, types, consts, div16, ["stride_w_k"], cfg.num_warps)
        except Exception as exc:  # every variant's error, not the first
            failures.append(compile_error(f"rows {label}", exc))
            continue
        most = max(loop_barriers(sass(kernel)), default=0)
        if held and most > LOOP_BARRIERS:
            failures.append(f"rows {label}: {most} barriers in a loop, want at most {LOOP_BARRIERS}")
    # every integer argument a constant, as torch.compile's analysis of what a launch writes compiles it
    types = ROW_TYPES
    consts = ROW_BASE | dict(BT=cfg.BT, BC=cfg.BC, STEPS=cfg.steps, W_WORD=0)
    consts = every_int_constant(conv_grad_rows_kernel, types, consts, ["stride_w_k"])
    try:
        compile_offline(conv_grad_rows_kernel, types, consts, [*types], (), cfg.num_warps)
    except Exception as exc:
        failures.append(compile_error("rows every int constant", exc))
    for seq_idx in (False, True):
        label = f"dx{' seq_idx' if seq_idx else ''}"
        consts = dict(K=4, D=1, HAS_SEQ_IDX=seq_idx, BT=cfg.DX_BT, BC=cfg.DX_BC)
        try:
            kernel = compile_offline(
                conv_grad_x_kernel, DX_TYPES, consts, [*DX_TYPES, "stride_dx", "C"], ["stride_w_k"], cfg.dx_warps
            )
        except Exception as exc:
            failures.append(compile_error(label, exc))
            continue
        if not seq_idx and (bars := sass(kernel).count("BAR.SYNC")) > 1:
            failures.append(f"{label}: {bars} barriers, want at most 1")
    return failures


def test_conv_backward_kernels_compile_for_sm90_and_keep_barriers_out_of_the_step_loop():
    ok, said = run_in_child(__file__, "compile_all")
    assert ok, said

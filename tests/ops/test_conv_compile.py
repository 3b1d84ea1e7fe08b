"""The conv kernels compiled for sm_90 on the CPU (``exactfuse.testing.offline``) under the specializations the
launcher produces: the interpreter runs the kernels' Python, so a front-end error that only a constexpr
argument raises (a stride Triton specializes to the constant 1, a flag that removes a branch) shows only here
or on a GPU; so does one that only torch.compile's analysis of a launch raises (every integer argument a
constant: ``offline.every_int_constant``). The compiles run in a child process without ``TRITON_INTERPRET``
(under it ``triton.jit`` gives interpreted functions, which do not compile)."""

import itertools

POINTERS = {n: "*bf16" for n in ("p_x", "p_w", "p_b", "p_res", "p_outer", "p_out", "p_state")} | {
    "p_sid": "*i32", "p_qsl": "*i32", "p_acc": "*i32", "p_init": "*i1", "p_tok": "*i32", "p_seq": "*i32",
}  # fmt: skip
BASE = dict(K=4, D=1, SQL=1, HAS_STATE=True, HAS_SID=True, INIT=1, HAS_TOKEN_MAP=False, HAS_RESIDUAL=True,
            HAS_OUTER=False, HAS_BIAS=True, UNROLL=1, HAS_SEQ_IDX=False, HEAD=0, CHANNELS_FIRST=False,
            FLAT_WINDOW=False, SCALAR_WINDOW=False, OWNED=False)  # fmt: skip
# (label, constexprs, the integer arguments equal to 1): decode over [slot, W, C] (channel stride 1) and
# [slot, C, W] (window stride 1, channel stride K - 1 = 3 or K = 4), K = 1 (weight stride 1), the flat run
# and the two-load path
DECODE = [
    ("decode wc", dict(BC=256, BW=4, WINDOW_TILE=True, S_ALIGN=1, W_ALIGN=4), ["stride_s_c"]),
    ("decode cw odd", dict(BC=256, BW=4, WINDOW_TILE=True, S_ALIGN=1, W_ALIGN=4, SCALAR_WINDOW=True), ["stride_s_w"]),
    ("decode cw even", dict(BC=256, BW=4, WINDOW_TILE=True, S_ALIGN=4, W_ALIGN=4, HEAD=1), ["stride_s_w"]),
    (
        "decode cw even owned",
        dict(BC=256, BW=4, WINDOW_TILE=True, S_ALIGN=4, W_ALIGN=4, HEAD=1, OWNED=True),
        ["stride_s_w"],
    ),
    ("decode cw even rows", dict(BC=256, BW=4, BT=4, WINDOW_TILE=True, S_ALIGN=4, W_ALIGN=4, HEAD=1), ["stride_s_w"]),
    (
        "decode cw odd rows",
        dict(BC=64, BW=16, BT=2, D=3, WINDOW_TILE=True, S_ALIGN=1, W_ALIGN=4, SCALAR_WINDOW=True),
        ["stride_s_w"],
    ),
    (
        "decode K1",
        dict(BC=256, BW=1, WINDOW_TILE=True, S_ALIGN=1, W_ALIGN=1, K=1, SCALAR_WINDOW=True),
        ["stride_s_w", "stride_w_c"],
    ),
    ("decode flat", dict(BC=256, BW=4, WINDOW_TILE=False, FLAT_WINDOW=True, S_ALIGN=1, W_ALIGN=4), ["stride_s_w"]),
    (
        "decode flat 9 rows",
        dict(BC=64, BW=16, BT=2, D=3, WINDOW_TILE=False, FLAT_WINDOW=True, S_ALIGN=1, W_ALIGN=4),
        ["stride_s_w"],
    ),
    ("decode two loads", dict(BC=64, BW=16, WINDOW_TILE=False, S_ALIGN=1, W_ALIGN=4), ["stride_s_w"]),
]


def _own(kernel, values):
    """The entries of ``values`` (a dict or names) that are arguments of ``kernel``."""
    if isinstance(values, dict):
        return {k: v for k, v in values.items() if k in kernel.arg_names}
    return [n for n in values if n in kernel.arg_names]


def compile_all() -> list[str]:
    """Every variant, with and without channel masks; the failures as ``label: error``."""
    from exactfuse.ops.conv.lean import conv_lean_kernel
    from exactfuse.ops.conv.prefill import conv_prefill_kernel
    from exactfuse.ops.conv.spec import conv_spec_kernel
    from exactfuse.ops.conv.update import conv_decode_kernel
    from exactfuse.ops.fastmath import SILU_RCP
    from exactfuse.testing.offline import compile_error, compile_offline, every_int_constant

    jobs = []
    for even_c in (False, True):
        decode = _own(conv_decode_kernel, POINTERS)
        for label, consts, ones in DECODE:
            c = _own(conv_decode_kernel, BASE | dict(ACT=SILU_RCP, BT=1, EVEN_C=even_c) | consts)
            jobs.append((f"{label} EVEN_C={even_c}", conv_decode_kernel, decode, c, [*decode, "stride_x"],
                         ["stride_w_k", *ones], 8))  # fmt: skip
        # speculative rows: the prefill kernel's row tile over 4 rows a request, read from the accepted position
        spec = _own(conv_spec_kernel, POINTERS)
        rows = _own(conv_spec_kernel, BASE | dict(ACT=SILU_RCP, SQL=4, BC=128, BT=16, EVEN_C=even_c))
        jobs.append((f"spec rows EVEN_C={even_c}", conv_spec_kernel, spec, rows, [*spec, "stride_x"],
                     ["stride_w_k", "stride_s_w"], 4))  # fmt: skip
        types = _own(conv_prefill_kernel, POINTERS)
        rows = BASE | dict(ACT=SILU_RCP, BC=128, BT=16, FIXUP=True, EVEN_C=even_c)
        jobs.append((f"prefill rows EVEN_C={even_c}", conv_prefill_kernel, types, _own(conv_prefill_kernel, rows),
                     [*types, "stride_x"], ["stride_w_k", "stride_s_w"], 4))  # fmt: skip
        types = _own(conv_lean_kernel, POINTERS)
        # the lean tile's rows as K shifted loads, as runs of 8 over a register window, and so at dilation 3
        # (short_conv's 9-row reach) with an outer residual and no state
        for tag, change in (
            ("", {}),
            (" runs", dict(BT=32, UNROLL=8)),
            (" runs D3", dict(BT=32, UNROLL=8, D=3, HAS_OUTER=True, HAS_STATE=False)),
            (" runs every tile", dict(BT=8, BC=256, UNROLL=8, HAS_STATE=False, HAS_SID=False, INIT=0, EVERY_TILE=True)),
            (" runs word", dict(BT=32, UNROLL=8, W_WORD=4)),
        ):
            lean = _own(conv_lean_kernel, rows | dict(W_ALIGN=4, W_WORD=0, EVERY_TILE=False) | change)
            jobs.append((f"prefill lean{tag} EVEN_C={even_c}", conv_lean_kernel, types, lean, [*types, "stride_x"],
                         ["stride_w_k"], 4))  # fmt: skip
    # every integer argument a constant, as torch.compile's analysis of what a launch writes compiles it
    for label, kernel, types, consts, _, ones, warps in (jobs[0], jobs[-1]):
        consts = every_int_constant(kernel, types, consts, ones)
        jobs.append((f"{label} every int constant", kernel, types, consts, [*types], (), warps))
    # the row, request and token counts as int64 arguments, as Inductor passes a symbolic size (a compiled
    # graph dynamic in the token count): index arithmetic widens where they enter it
    for label, kernel, types, consts, div16, ones, warps in list(jobs):
        sizes = {n: "i64" for n in ("L", "R", "N") if n in kernel.arg_names}
        jobs.append((f"{label} int64 sizes", kernel, types | sizes, consts, div16, ones, warps))
    failures = []
    for label, kernel, types, consts, div16, ones, warps in jobs:
        try:
            compile_offline(kernel, types, consts, div16, ones, warps)
        except Exception as exc:  # every variant's error, not the first
            failures.append(compile_error(label, exc))
    return failures


def test_conv_kernels_compile_for_sm90_under_the_launchers_specializations():
    from exactfuse.testing.offline import run_in_child

    ok, said = run_in_child(__file__, "compile_all")
    assert ok, said


def init_grad_products_unfused() -> list[str]:
    """The initial states' gradient kernel compiled for sm_90 (bf16 and fp32, two K x D): its SASS has no FFMA,
    so each product is rounded before its sum, as the spec's separate multiply and add (what keeps the
    compiled and eager backward the same bits); a compile error or an FFMA is a failure."""
    from exactfuse.ops.conv.grad_kernels import conv_grad_init_kernel
    from exactfuse.testing.offline import compile_error, compile_offline, sass

    failures = []
    for dtype, (K, D) in itertools.product(("bf16", "fp32"), ((4, 1), (3, 2))):
        types = {"p_dconv": f"*{dtype}", "p_w": f"*{dtype}", "p_qsl": "*i32", "p_out": f"*{dtype}"}
        label = f"init grad {dtype} K{K} D{D}"
        try:
            kernel = compile_offline(conv_grad_init_kernel, types, dict(K=K, D=D, BC=256), [*types], ["stride_w_k"])
        except Exception as exc:
            failures.append(compile_error(label, exc))
            continue
        if fused := [line.strip() for line in sass(kernel).splitlines() if "FFMA" in line]:
            failures.append(f"{label}: {len(fused)} FFMA, e.g. {fused[0]}")
    return failures


def test_initial_state_gradient_products_are_rounded_before_their_sum():
    from exactfuse.testing.offline import run_in_child

    ok, said = run_in_child(__file__, "init_grad_products_unfused")
    assert ok, said

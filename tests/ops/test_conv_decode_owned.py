"""The decode kernel stores the register window without a CTA barrier where the launcher's ``window_owned`` says
each thread overwrites only what it read itself (``decode.decode_window``'s OWNED). That rests on two facts of the
compiled kernel, read here off its Triton GPU IR (compiled for sm_90 on the CPU, ``exactfuse.testing.offline``)
at the launch rule's configurations: every store into the state takes the pointer tensor of a load (the same
value, so the same layout), and that layout holds each element in one thread only (no dimension of the tile
smaller than the layout's reach along it). On a tile with fewer elements than threads the check finds a store
it cannot call owned (Triton 3.6 stores it through pointers of another layout, replicated), so it can tell."""

import re

from exactfuse.testing.offline import run_in_child

POINTERS = {n: "*bf16" for n in ("p_x", "p_w", "p_b", "p_res", "p_outer", "p_out", "p_state")}
POINTERS |= {"p_sid": "*i32", "p_init": "*i1", "p_tok": "*i32"}
BASE = dict(K=4, D=1, HAS_STATE=True, HAS_SID=True, INIT=1, HAS_TOKEN_MAP=False, HAS_RESIDUAL=False,
            HAS_OUTER=False, HAS_BIAS=True, ACT=-1, BT=1, HEAD=0, WINDOW_TILE=True, W_ALIGN=4, CHANNELS_FIRST=False,
            FLAT_WINDOW=False, EVEN_C=True, SCALAR_WINDOW=False)  # fmt: skip
# (label, C, window, state storage: "cw" [slot, C, W] (window stride 1) or "wc" (channel stride 1), the state's
# channel stride in elements, dilation, head): FLA's [B, C, K] cache, the [slots, C, K - 1] slot cache (whose
# odd channel stride takes the scalar window), [slots, K - 1, C], short_conv's [C, W] slots of 9 positions
CASES = [
    ("FLA [B, C, K]", 10240, 4, "cw", 4, 1, 1),
    ("slot cache [slots, C, 3]", 10240, 3, "cw", 3, 1, 0),
    ("slot cache [slots, 3, C]", 10240, 3, "wc", 1, 1, 0),
    ("short_conv [slots, C, 9]", 2048, 9, "cw", 9, 3, 0),
]
LAYOUT = re.compile(
    r"^(#\w+) = #ttg\.blocked<\{sizePerThread = \[([\d, ]+)\], threadsPerWarp = \[([\d, ]+)\], "
    r"warpsPerCTA = \[([\d, ]+)\]"
)
POINTER_TYPE = r"tensor<((?:\d+x)+)!tt\.ptr<\w+>, (#\w+)>"


def window_stores(ttgir: str) -> tuple[list[str], int]:
    """The problems of the IR's stores (a store into the state whose pointers no load took, or whose layout
    reaches past the tile), and the count of stores whose pointers a load took."""
    reach = {}
    for line in ttgir.splitlines():
        if m := LAYOUT.match(line):
            dims = [[int(v) for v in group.split(",")] for group in m.groups()[1:]]
            reach[m.group(1)] = [a * b * c for a, b, c in zip(*dims, strict=True)]
    loaded = set(re.findall(r"= tt\.load (%\w+)", ttgir))
    problems, owned, unloaded = [], 0, 0
    for pointer, shape, layout in re.findall(r"tt\.store (%\w+), [^:]*: " + POINTER_TYPE, ttgir):
        if pointer not in loaded:
            unloaded += 1  # the output's store: nothing reads those rows
            continue
        owned += 1
        dims = [int(v) for v in shape.rstrip("x").split("x")]
        if any(r > d for r, d in zip(reach[layout], dims, strict=True)):
            problems.append(f"the store at {pointer} ({shape}{layout}) reaches {reach[layout]}: replicated")
    if unloaded != 1:
        problems.append(f"{unloaded} stores take pointers no load took, want 1 (the output's)")
    return problems, owned


def compile_cases() -> list[str]:
    """Each case at the rule's configuration, then the FLA cache at 16 channels over 8 warps (a [4, 16] tile over
    256 threads); the failures."""
    from exactfuse.ops.conv import heuristics
    from exactfuse.ops.conv.decode import window_owned
    from exactfuse.ops.conv.launch import _scalar_window, _stride_alignment
    from exactfuse.ops.conv.update import conv_decode_kernel
    from exactfuse.testing.offline import compile_offline

    failures = []
    jobs = []
    for label, C, window, storage, stride_c, dilation, head in CASES:
        cfg = heuristics.conv_config(C, window, "decode", storage == "wc", False)
        s_align = _stride_alignment(stride_c)
        consts = dict(BC=cfg.BC, BW=cfg.BW, D=dilation, HEAD=head, S_ALIGN=s_align, CHANNELS_FIRST=cfg.channels_first,
                      SCALAR_WINDOW=_scalar_window(storage == "wc", s_align, window))  # fmt: skip
        if not window_owned(False, cfg.BC, cfg.num_warps):
            failures.append(f"{label}: the rule's {cfg.BC} channels over {cfg.num_warps} warps are not owned")
        jobs.append((label, consts, cfg.num_warps, storage, True))
    jobs.append(("FLA [B, C, K] at 16 channels, 8 warps", dict(BC=16, BW=4, HEAD=1, S_ALIGN=4), 8, "cw", False))
    for label, consts, warps, storage, owned in jobs:
        ones = ["stride_w_k", "stride_sid", "stride_s_c" if storage == "wc" else "stride_s_w"]
        kernel = compile_offline(
            conv_decode_kernel, POINTERS, BASE | consts | dict(OWNED=owned), [*POINTERS, "stride_x"], ones, warps
        )
        problems, stores = window_stores(kernel.asm["ttgir"])
        if owned and (problems or stores == 0):
            failures.append(f"{label}: {problems or 'no store into the state takes a load pointer'}")
        if not owned and not problems:
            failures.append(f"{label}: fewer elements than threads, yet every store looks owned: the check cannot tell")
    return failures


def test_decode_window_stores_only_what_each_thread_read():
    ok, said = run_in_child(__file__, "compile_cases")
    assert ok, said

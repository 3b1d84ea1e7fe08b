"""sparse_paged_attention's kernels compiled for sm_90 on the CPU (``exactfuse.testing.offline``) under the
launcher's specializations: every merge shape (splits a group, a column slice, a programmatic dependent
launch) and the partial kernel with the merge in the launch, which the interpreter does not compile. The
merge that reads every split at once must issue all of its loads before its first barrier: a reduction
across threads between two splits' loads makes each split an L2 round trip of its own."""

import re

from exactfuse.testing.offline import run_in_child

MERGE_TYPES = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "gate_ptr": "*bf16", "out_ptr": "*bf16"}
PARTIAL_TYPES = {"q_ptr": "*bf16", "gate_ptr": "*bf16", "out_ptr": "*bf16", "part_ptr": "*fp32", "lse_ptr": "*fp32",
                 "count_ptr": "*i32", "qk_scale": "fp32", "out_scale": "fp32"}  # fmt: skip
PARTIAL_TYPES |= {n: "*i32" for n in ("idx_ptr", "counts_ptr", "table_ptr", "req_ptr")}
WIDE_SPLITS = 16  # the rows = 1 rule's splits, all merged in one group


def _div16(kernel) -> list[str]:
    return [n for n in kernel.arg_names if n.endswith("_ptr") or n.startswith("s_")]


def loads_before_first_barrier(text: str) -> int:
    """Global loads (``LDG``) in ``text`` (SASS) before its first ``BAR.SYNC``."""
    head = text.split("BAR.SYNC", 1)[0]
    return len(re.findall(r"\bLDG\.", head))


def compile_all() -> list[str]:
    """Every variant; the failures as ``label: error``."""
    from exactfuse.ops.sparse_paged_attention.merge_kernel import sparse_attention_merge_kernel
    from exactfuse.ops.sparse_paged_attention.partial_kernel import sparse_attention_partial_kernel
    from exactfuse.testing.offline import compile_error, compile_offline, sass

    failures = []
    merge = sparse_attention_merge_kernel
    for group, block_d, pdl, warps in ((1, 0, False, 2), (8, 0, False, 2), (WIDE_SPLITS, 64, True, 4)):
        label = f"merge group {group} block_d {block_d}{' pdl' if pdl else ''}"
        consts = dict(HQ=24, D=128, GATE=1, MERGE_GROUP=group, BLOCK_D=block_d, PDL=pdl)
        try:
            kernel = compile_offline(merge, MERGE_TYPES, consts, _div16(merge), (), warps)
        except Exception as exc:  # every variant's error, not the first
            failures.append(compile_error(label, exc))
            continue
        if group == WIDE_SPLITS:  # the gate, every split's LSE for the maximum, then each split's LSE and O
            early = loads_before_first_barrier(sass(kernel))
            if early < 2 + 2 * WIDE_SPLITS:
                failures.append(f"{label}: {early} loads before the first barrier, want {2 + 2 * WIDE_SPLITS}")
    partial = sparse_attention_partial_kernel
    for kv in ("bf16", "fp8e4nv"):
        types = PARTIAL_TYPES | {"k_ptr": f"*{kv}", "v_ptr": f"*{kv}"}
        fp8 = kv.startswith("fp8")
        consts = dict(G=12, HQ=24, D=128, BLOCK_M=16, BLOCK_N=64, HAS_COUNTS=True, GATE=1, SPLIT=True, FIXUP=True,
                      PV_FP16=fp8, V_PAIRS=fp8, PREFETCH_SLOTS=True, MERGE_GROUP=8)  # fmt: skip
        try:
            compile_offline(partial, types, consts, [*_div16(partial), "W"], (), 8, 2)
        except Exception as exc:
            failures.append(compile_error(f"partial fixup {kv}", exc))
    return failures


def test_sparse_attention_kernels_compile_for_sm90_and_the_wide_merge_loads_at_once():
    ok, said = run_in_child(__file__, "compile_all")
    assert ok, said

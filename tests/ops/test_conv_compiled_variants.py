"""Every launch variant of the conv family compiled by Inductor with unbacked token counts and every other
argument static (how vLLM compiles a model: its token dimensions marked, its shapes and module constants
specialized), bit for bit against the same provider's eager launch.

The variants are the launcher's choices (``ops/conv/launch.py``): the lean prefill kernel and the fixup
launch, the lean kernel that takes every tile (no state), the prefill kernel's plain tiles (token maps,
``seq_idx``), the update kernel's decode register window (tile and scalar loads), flat run and speculative
rows, the state write-back, with and without a state, a residual and an outer residual, and the backward's two
kernels. Each declared GPU case's launches are recorded without running a kernel; the first case of each new
set of launches is then run eagerly, compiled and compared, and a test asserts that the cases reach every
variant, so a variant the declared cases stop reaching fails here, not silently.
Inductor types a symbolic size as an int64 argument, which the eager launches never do: a kernel whose
integer types disagree under it (an ``if`` whose branches give int32 and int64) fails only on this path.
"""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch._dynamo.decorators import mark_unbacked

import exactfuse
from exactfuse.testing import clone_args

INT_VIEW = {torch.float16: torch.int16, torch.bfloat16: torch.int16, torch.float32: torch.int32}
FLAGS = ("MODE", "FIXUP", "EVERY_TILE", "WINDOW_TILE", "FLAT_WINDOW", "SCALAR_WINDOW", "HAS_STATE", "HAS_RESIDUAL",
         "HAS_OUTER", "HAS_TOKEN_MAP", "HAS_SEQ_IDX", "HAS_INIT", "HAS_SID", "INIT", "HAS_BIAS")  # fmt: skip
# what each op's declared cases must reach: (kernel, flag values), each met by one of its launches
VARIANTS = {
    "lean prefill": ("conv_lean_kernel", {}),
    "lean prefill of every tile": ("conv_lean_kernel", {"EVERY_TILE": True}),
    "fixup launch": ("conv_prefill_kernel", {"FIXUP": True}),
    "prefill rows with a token map": ("conv_prefill_kernel", {"FIXUP": False, "HAS_TOKEN_MAP": True}),
    "prefill rows with seq_idx": ("conv_prefill_kernel", {"HAS_SEQ_IDX": True}),
    "prefill without a state": ("conv_prefill_kernel", {"HAS_STATE": False}),
    "speculative rows": ("conv_spec_kernel", {}),
    "decode register window": ("conv_decode_kernel", {"WINDOW_TILE": True, "SCALAR_WINDOW": False}),
    "decode scalar window": ("conv_decode_kernel", {"SCALAR_WINDOW": True}),
    "decode flat run": ("conv_decode_kernel", {"FLAT_WINDOW": True}),
    "decode residual and outer residual": ("conv_decode_kernel", {"HAS_RESIDUAL": True, "HAS_OUTER": True}),
    "state write-back": ("conv_state_kernel", {}),
    "backward rows": ("conv_grad_rows_kernel", {}),
    "backward rows with initial states": ("conv_grad_rows_kernel", {"HAS_INIT": True}),
    "backward dx": ("conv_grad_x_kernel", {}),
}
PREFILL = ["lean prefill", "fixup launch", "state write-back"]
DECODE = ["speculative rows", "decode register window", "decode scalar window"]
REQUIRED = {
    "short_conv": [*PREFILL, *DECODE, "prefill rows with a token map", "decode flat run",
                   "decode residual and outer residual"],
    "causal_conv1d": [*PREFILL, "prefill rows with seq_idx", "prefill without a state"],
    "causal_conv1d_update": [*PREFILL, *DECODE],  # its chunks of several rows are prefill launches
    "causal_conv1d_fn": ["lean prefill of every tile", "prefill rows with seq_idx", "prefill without a state"],
    "causal_conv1d_fn_backward": ["backward rows", "backward rows with initial states", "backward dx"],
}  # fmt: skip
SHARDS = 3


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(INT_VIEW[t.dtype])


class _Recorder:
    """``torch.library.wrap_triton`` that records each launch's kernel name and flags, then launches (``dry``:
    records only; the launchers choose their launches from shapes and constants, never from a kernel's output)."""

    def __init__(self, real, dry: bool = False):
        self.real, self.launches, self.dry = real, [], dry

    def __call__(self, kernel):
        wrapped = self.real(kernel)
        recorder = self

        class _Grid:
            def __getitem__(self, grid):
                def launch(*args, **kwargs):
                    flags = tuple((k, kwargs[k]) for k in FLAGS if k in kwargs)
                    recorder.launches.append((kernel.fn.__name__, flags))
                    return None if recorder.dry else wrapped[grid](*args, **kwargs)

                return launch

        return _Grid()


@contextlib.contextmanager
def _recording(dry: bool = False):
    recorder = _Recorder(torch.library.wrap_triton, dry)
    torch.library.wrap_triton = recorder
    try:
        yield recorder.launches
    finally:
        torch.library.wrap_triton = recorder.real


def _launches(op, case, dry: bool) -> tuple[tuple, frozenset]:
    """The case's arguments after the triton provider's call (with its output) and the set of its launches;
    ``dry``: the launches recorded, no kernel run (the results are not the op's)."""
    args, kwargs = clone_args(case.args, case.kwargs)
    with _recording(dry) as launches:
        out = op.run_provider("triton", *args, **kwargs)
    return (*args, *kwargs.values(), out), frozenset(launches)


def _selected(name: str, device: str, dtype: torch.dtype, shard: int = 0, shards: int = 1, eager: bool = True):
    """The first of the op's declared cases with each new set of launches (found without running a kernel):
    every ``shards``-th of them from ``shard`` on as (case, eager results, launches), and the launches of all of
    them (what ``_unreached`` checks). Only the selected cases run eagerly (``eager``; else their results are
    None), so that the shards do not each compile every case's kernels."""
    op, seen, chosen = exactfuse.get(name), set(), []
    for case in op.iter_cases(device, dtype):
        _, launches = _launches(op, case, dry=True)
        if launches and launches not in seen:
            seen.add(launches)
            chosen.append((case, launches))
    mine = [(case, _launches(op, case, dry=False)[0] if eager else None, ls) for case, ls in chosen[shard::shards]]
    return mine, [launch for _, ls in chosen for launch in ls]


def _meets(launch, what: str) -> bool:
    kernel, want = VARIANTS[what]
    return launch[0] == kernel and all(dict(launch[1]).get(n) == v for n, v in want.items())


def _unreached(name: str, launches) -> list[str]:
    return [what for what in REQUIRED[name] if not any(_meets(launch, what) for launch in launches)]


def _model_call(op, args: tuple, kwargs: dict):
    """``(call, tensors)``: ``op`` on the case's arguments as a function of its tensors alone, every other
    argument (dilation, mode, activation, the pad slot) a constant of it, as model code holds them."""
    values = [*args, *kwargs.values()]
    where = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
    names = list(kwargs)

    def call(*tensors):
        filled = list(values)
        for i, t in zip(where, tensors, strict=True):
            filled[i] = t
        return op(*filled[: len(args)], **dict(zip(names, filled[len(args) :], strict=True)))

    return call, [values[i] for i in where]


def _why(exc: BaseException) -> str:
    """An exception and its causes, each as its type and its message's last lines (Dynamo wraps the error a
    fake-tensor call raised in one whose first line says only that)."""
    said = []
    while exc is not None:
        lines = [line for line in str(exc).splitlines() if line.strip()]
        said.append(f"{type(exc).__name__}: {' | '.join(lines[-4:])[:600]}")
        exc = exc.__cause__ or exc.__context__
    return " <- ".join(said)


def _flatten(value):
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flatten(v)]
    return [value]


def _token_major(args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The floating-point activations whose first dimension is the first tensor's (the token count); not a
    ``[slot, ...]`` state cache."""
    tensors = [a for a in (*args, *kwargs.values()) if isinstance(a, torch.Tensor)]
    rows = tensors[0].shape[0]
    return [t for t in tensors if t.is_floating_point() and t.dim() == 2 and t.shape[0] == rows]


class _TraceDoneError(Exception):
    """Raised by :func:`_trace_only` once Dynamo has traced the whole call."""


def _trace_only(graph, example_inputs):
    """A torch.compile backend that stops once Dynamo's trace (the ops' fake implementations) is done, so that
    the interpreter does not run the kernels a second time."""
    raise _TraceDoneError


def _raised(exc: BaseException | None, kind: type) -> bool:
    while exc is not None and not isinstance(exc, kind):
        exc = exc.__cause__ or exc.__context__
    return exc is not None


def _compiled_failures(op, chosen, backend) -> list[str]:
    """Each chosen case compiled (``backend``) with its token dimensions unbacked and every other argument
    static, against its eager results bit for bit (``_trace_only``: traced only); the failures, every one
    with its cause's last lines."""
    torch._dynamo.reset()
    failures = []
    limits = {"recompile_limit": len(chosen) + 8, "accumulated_recompile_limit": 4 * len(chosen)}
    # the triton provider compiled against the triton provider eager
    with torch._dynamo.config.patch(**limits), op.priority(["triton"]):
        for case, expected, launches in chosen:
            args, kwargs = clone_args(case.args, case.kwargs)
            call, tensors = _model_call(op, args, kwargs)
            for t in _token_major(args, kwargs):
                if t.shape[0] > 1:  # an unbacked size of 0 or 1 is specialized anyway
                    mark_unbacked(t, 0)
            try:
                # dynamic=False: the marked token dimensions stay unbacked, the rest (and the closure's ints,
                # which dynamic=True would trace as symbols) specialized, as a compiled model holds them
                out = torch.compile(call, dynamic=False, fullgraph=True, backend=backend)(*tensors)
            except Exception as exc:  # every variant's failure, not the first
                if not _raised(exc, _TraceDoneError):
                    failures.append(f"{case.id}: {_why(exc)}")
                continue
            got = [*args, *kwargs.values(), out]
            for i, (a, b) in enumerate(zip(_flatten(got), _flatten(list(expected)), strict=True)):
                if isinstance(a, torch.Tensor) and a.is_floating_point() and not torch.equal(bits(a), bits(b)):
                    failures.append(f"{case.id}: output {i} differs from eager ({sorted(launches)})")
    return failures


@pytest.mark.interpreter
@pytest.mark.parametrize("name", list(REQUIRED))
def test_interpreter_declared_cases_reach_every_launch_variant_and_trace_with_unbacked_tokens(name):
    """The declared cases reach every variant, and Dynamo traces each variant's first case through the op's
    fake implementation with unbacked token counts: a spec or check that guards on a token count (say
    ``max(T - 1, 0)``) fails here, before any GPU."""
    op, (chosen, launches) = exactfuse.get(name), _selected(name, "cpu", torch.float16, eager=False)
    unreached = _unreached(name, launches)
    assert not unreached, f"no declared case of {name} reaches: {unreached}"
    failures = _compiled_failures(op, chosen, _trace_only)
    assert not failures, f"{len(failures)} of {len(chosen)} traced variants fail:\n" + "\n".join(failures)


@pytest.mark.gpu
@pytest.mark.parametrize("shard", range(SHARDS))
@pytest.mark.parametrize("name", list(REQUIRED))
def test_gpu_every_launch_variant_compiled_dynamic_unbacked_is_eager_bit_for_bit(name, shard):
    """bf16 only: the variants are the launcher's choices, which do not depend on the dtype (the compile
    tests of test_compiler.py cover fp16). Each shard compiles every SHARDS-th variant, so that the
    Inductor compiles (15-20 s each) spread over the suite's workers."""
    op, (mine, launches) = exactfuse.get(name), _selected(name, "cuda", torch.bfloat16, shard, SHARDS)
    unreached = _unreached(name, launches)
    assert not unreached, f"no declared case of {name} reaches: {unreached}"
    failures = _compiled_failures(op, mine, "inductor")
    assert not failures, f"{len(failures)} of {len(mine)} compiled variants fail:\n" + "\n".join(failures)

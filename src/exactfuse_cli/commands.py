"""The commands of ``exactfuse``, run on the arguments the package's parser read: info, list and warmup
here, verify and bench in their modules (``verify.py``, ``bench.py``, imported when their command runs),
and what the commands share: the ops ``--op`` names and the device they run on. Without a CUDA GPU the
parser has turned the Triton interpreter on before this import.
"""

from __future__ import annotations

import os
import sys
import time
import warnings

import torch
from rich.console import Console
from rich.table import Table

from exactfuse.utils import DTYPE_NAMES, DTYPES_BY_NAME

DTYPES = DTYPES_BY_NAME
SHORT = DTYPE_NAMES


def _quiet_interpreter() -> None:
    # numpy's overflow/invalid warnings on Inf/NaN inputs, raised inside the interpreter.
    warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton.runtime.interpreter")


def device_here() -> torch.device:
    """Where info, list and verify run the cases: the CUDA GPU, else the CPU (the Triton interpreter)."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


class UnknownOpError(KeyError):
    """``--op`` named no declared op."""

    def __str__(self) -> str:
        return str(self.args[0])


def compile_workers() -> int:
    """Worker processes for compiling in parallel (``verify --jobs``, the bench's warm-up): a process per
    core but two, at most 16, on a CUDA machine with 8 or more cores, where most of a cold run is
    compiling one kernel at a time a process; else 1."""
    cores = os.cpu_count() or 1
    return min(cores - 2, 16) if torch.cuda.is_available() and cores >= 8 else 1


def compiled_marker(kind: str, task: tuple[str, ...]) -> str:
    """An empty file in Triton's cache directory saying that ``task`` of ``kind`` (a quick verify row, a
    bench warm-up task) ran here with this exactfuse, Triton, torch and GPU, so its compiles are in the
    caches; it goes when Triton's cache is cleared."""
    import hashlib

    import triton
    from triton import knobs

    import exactfuse

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    where = "|".join((exactfuse.__version__, triton.__version__, torch.__version__, device))
    key = hashlib.sha256(where.encode()).hexdigest()[:16]
    name = ".".join(part.replace(os.sep, "_") for part in task)
    return os.path.join(knobs.cache.dir, f"exactfuse-{kind}", key, name)


def mark_compiled(kind: str, task: tuple[str, ...]) -> None:
    """Write :func:`compiled_marker`'s file; a read-only cache is passed over (the next run compiles in
    parallel again)."""
    path = compiled_marker(kind, task)
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "a").close()
    except OSError:
        pass


def named_ops(names: list[str] | None):
    """The ops ``--op`` names (all without it); an unknown name raises :class:`UnknownOpError`."""
    from exactfuse.registry import OPS

    unknown = [n for n in names or () if n not in OPS]
    if unknown:
        raise UnknownOpError(f"unknown op {', '.join(map(repr, unknown))}; known ops: {', '.join(sorted(OPS))}")
    return [OPS[n] for n in names] if names else list(OPS.values())


def cmd_info(args, console: Console) -> int:
    if args.op is not None:
        (op,) = named_ops([args.op])
        console.print(_op_info(op, device_here()))
        return 0
    import triton

    import exactfuse
    from exactfuse.registry import platform

    table = Table(title="exactfuse info", show_header=False)
    table.add_row("exactfuse", exactfuse.__version__)
    table.add_row("python", sys.version.split()[0])
    table.add_row("torch", torch.__version__)
    table.add_row("triton", triton.__version__)
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        table.add_row("device", f"{props.name} (sm_{props.major}{props.minor}, {props.multi_processor_count} SMs)")
    else:
        mode = "Triton interpreter (TRITON_INTERPRET=1)" if platform.interpreter_enabled() else "none"
        table.add_row("device", f"no CUDA GPU; Triton: {mode}")
    for device_type, order in platform.DEFAULT_PRIORITY.items():
        table.add_row(f"priority {device_type}", ", ".join(order))
    for name, order in platform.env_priority().items():
        table.add_row(f"EXACTFUSE_PRIORITY {name}", ", ".join(order))
    console.print(table)
    return 0


def _public_signature(op) -> str:
    """``name(parameters) -> result`` as the user calls the op: a :class:`KeywordOp`'s own signature (keywords
    after ``*``), else the native spec's."""
    import exactfuse
    from exactfuse.registry import KeywordOp
    from exactfuse.registry.op import _signature_of

    public = getattr(exactfuse, op.name, None)
    signature = _signature_of(public._call) if isinstance(public, KeywordOp) and public.op is op else op.signature
    return f"{op.name}{signature}".replace("torch.Tensor", "Tensor")


def _provider_verdicts(op, device: torch.device) -> tuple[str, dict[str, str]]:
    """The provider chosen for ``op``'s first non-empty input case on ``device``, and one line per provider
    (in the order they are tried, then the others) saying why it is chosen or not: unavailable here, not in
    this device's priority order, declining the case, or accepting it after the chosen one (the registry's
    rule: the first in the order that accepts)."""
    from exactfuse.registry import platform

    order = op.priority_order(device.type)
    where = f"{device.type} tensors ({'EXACTFUSE_PRIORITY' if op.name in platform.env_priority() else 'the default'})"
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
    dtype = dtype if dtype in op.dtypes else op.dtypes[0]
    case = next((c for c in op.cases(device, dtype, quick=True) if has_elements(c)), None)
    verdicts, chosen = {}, None
    for name in [*order, *(n for n in op.providers if n not in order)]:
        provider = op.providers[name]
        if (reason := provider.unavailable_reason) is not None:
            verdicts[name] = f"unavailable here: {reason}"
        elif name not in order:
            verdicts[name] = f"not tried: the order for {where} is {', '.join(order)}"
        elif case is None:
            verdicts[name] = f"available, number {order.index(name) + 1} in the order for {where}"
        elif (verdict := provider.accepts(*case.args, **case.kwargs)) is not True:
            verdicts[name] = f"declines the case: {verdict}"
        elif chosen is None:
            chosen, verdicts[name] = name, f"chosen: the first in the order for {where} to accept the case"
        else:
            verdicts[name] = f"accepts the case, after {chosen} in the order for {where}"
    if case is None:
        return "- (the op declares no input case)", verdicts
    return f"{chosen or 'none'} (for case {case.id}, {SHORT[dtype]} on {device.type})", verdicts


def has_elements(case) -> bool:
    """Whether ``case`` has a tensor argument with elements."""
    return any(isinstance(a, torch.Tensor) and a.numel() for a in case.args)


def _op_info(op, device: torch.device) -> Table:
    """``exactfuse info <op>``: the op's signature, contract per dtype, backward, providers, and which
    provider runs here and why the others do not."""
    from exactfuse.registry import autograd

    table = Table(title=f"exactfuse info {op.name}", show_header=False)
    table.add_row("op", op.name)
    if op.__doc__:  # the docstring's first paragraph
        table.add_row("computes", " ".join(op.__doc__.strip().split("\n\n")[0].split()))
    table.add_row("signature", _public_signature(op))
    table.add_row("dtypes", ", ".join(SHORT[d] for d in op.dtypes))
    for dtype in op.dtypes:
        on_cuda, on_cpu = op.contract_for(dtype, "cuda").describe(dtype), op.contract_for(dtype, "cpu").describe(dtype)
        both = on_cuda if on_cuda == on_cpu else f"CUDA: {on_cuda}; CPU (interpreter): {on_cpu}"
        table.add_row(f"contract {SHORT[dtype]}", both)
    table.add_row("compiler", op.compiler)
    table.add_row("backward", autograd.describe(op))
    table.add_row("providers", ", ".join(op.providers))
    table.add_row(f"priority {device.type}", ", ".join(op.priority_order(device.type)))
    chosen, verdicts = _provider_verdicts(op, device)
    for name, verdict in verdicts.items():
        table.add_row(f"provider {name}", verdict)
    table.add_row("chosen here", chosen)
    return table


def cmd_list(args, console: Console) -> int:
    from exactfuse.registry import autograd
    from exactfuse.registry.contracts import describe

    device = device_here()
    where = "CUDA" if device.type == "cuda" else "the CPU (interpreter)"
    table = Table(title=f"exactfuse ops: contracts and providers for {where}")
    for col in ("op", "providers", "compiler", f"contract on {where}", "backward", "selected here"):
        table.add_column(col)
    for op in named_ops(args.op):
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float16
        cases = op.cases(device, dtype, quick=True)
        selected = "-"
        for case in cases:
            if has_elements(case):
                selected = op.select(*case.args, **case.kwargs).name
                break
        contract = op.contract if device.type == "cuda" else op.interpreter_contract
        providers = ", ".join(n if p.available else f"{n} (unavailable here)" for n, p in op.providers.items())
        row = (op.name, providers, op.compiler, describe(contract, op.dtypes, "\n"), autograd.describe(op), selected)
        table.add_row(*row)
    console.print(table)
    return 0


def cmd_warmup(args, console: Console) -> int:
    from exactfuse.warmup import warmup

    if not torch.cuda.is_available():
        console.print("[yellow]warmup compiles GPU kernels; no CUDA GPU here[/]")
        return 2
    start = time.perf_counter()
    dtypes = [DTYPES[d] for d in args.dtype] if args.dtype else [torch.bfloat16]
    warmed = warmup(args.op or None, dtypes=dtypes)
    console.print(f"warmed up {', '.join(warmed)} in {time.perf_counter() - start:.1f}s")
    return 0


def cmd_verify(args, console: Console) -> int:
    from exactfuse_cli import verify

    return verify.run(args, console)


def cmd_bench(args, console: Console) -> int:
    from exactfuse_cli import bench

    return bench.run(args, console)


COMMANDS = {"info": cmd_info, "list": cmd_list, "verify": cmd_verify, "warmup": cmd_warmup, "bench": cmd_bench}


def run(args) -> int:
    """Run the parsed command; an unknown ``--op`` is a one-line usage error (exit 2)."""
    _quiet_interpreter()
    console = Console() if sys.stdout.isatty() else Console(width=160)
    try:
        return COMMANDS[args.command](args, console)
    except UnknownOpError as err:
        console.print(f"[red]{err}[/]")
        return 2

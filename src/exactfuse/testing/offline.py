"""Compile a Triton kernel for a GPU target on a machine without one (``triton.compile`` of an ``ASTSource``):
what the front end and the backend make of a specialization the launcher produces, which the interpreter
does not check (it runs the Python, with no constexpr specialization and no types)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterable

import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


def compile_offline(
    fn,
    types: dict,
    constexprs: dict,
    div16: Iterable[str] = (),
    ones: Iterable[str] = (),
    num_warps: int = 4,
    num_stages: int | None = None,
    arch: int = 90,
    maxnreg: int | None = None,
):
    """``fn`` (a Triton or a Gluon kernel) compiled for ``sm_<arch>``: arguments typed by ``types`` (Triton type
    names; others ``i32``), ``constexprs`` by value, ``ones`` the integer arguments equal to 1 (which Triton
    specializes to the constant), ``div16`` those marked 16-divisible (pointers and strides a launch would see
    aligned); ``maxnreg`` caps the registers a thread, as the launch option does."""
    names = list(fn.arg_names)
    ones = list(ones)
    sig = {n: types.get(n, "i32") for n in names}
    sig.update({n: "constexpr" for n in (*constexprs, *ones)})
    consts = {(names.index(k),): v for k, v in constexprs.items()} | {(names.index(k),): 1 for k in ones}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    options = {"num_warps": num_warps} | ({"num_stages": num_stages} if num_stages else {})
    options |= {"maxnreg": maxnreg} if maxnreg else {}
    if fn.is_gluon():
        from triton.experimental.gluon._runtime import GluonASTSource

        source = GluonASTSource(fn, sig, constexprs=consts, attrs=attrs)
    else:
        source = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)


def every_int_constant(fn, types: dict, constexprs: dict, ones: Iterable[str] = (), value: int = 64) -> dict:
    """``constexprs`` with every argument of ``fn`` that ``types`` does not type made the constant ``value`` (1 for
    ``ones``): how torch.compile's kernel analysis (``torch._higher_order_ops.triton_kernel_wrap``, torch 2.11)
    specializes a launch to find what it writes. A kernel that fails to compile so makes that analysis assume
    every input written, and clone each (two arguments that are one tensor then come back as two)."""
    ones = set(ones)
    rest = [n for n in fn.arg_names if n not in types and n not in constexprs]
    return constexprs | {n: 1 if n in ones else value for n in rest}


def cubin_tool(kernel, tool: str, *flags: str) -> str:
    """What ``tool`` (``nvdisasm``, ``cuobjdump``: the CUDA tools the Triton wheel ships) prints for the cubin
    of a compiled kernel (``compile_offline``'s result)."""
    path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", tool)
    with tempfile.TemporaryDirectory() as tmp:
        cubin = os.path.join(tmp, "kernel.cubin")
        with open(cubin, "wb") as f:
            f.write(kernel.asm["cubin"])
        return subprocess.run([path, *flags, cubin], capture_output=True, text=True, check=True).stdout


def sass(kernel) -> str:
    """The SASS of a compiled kernel (``compile_offline``'s result)."""
    return cubin_tool(kernel, "nvdisasm", "-c")


def largest_loop(text: str) -> list[str]:
    """The instructions of the longest loop body in ``text`` (SASS): from a label to the branch back to it."""
    lines = text.splitlines()
    labels: dict[str, int] = {}
    best: list[str] = []
    for i, line in enumerate(lines):
        if m := re.match(r"\s*(\.L_x_\d+):", line):
            labels[m.group(1)] = i
        if (m := re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", line)) and m.group(1) in labels:
            body = [ln for ln in lines[labels[m.group(1)] : i + 1] if re.match(r"\s+/\*[0-9a-f]{4,}\*/", ln)]
            best = body if len(body) > len(best) else best
    return best


def loop_barriers(text: str) -> list[int]:
    """The ``BAR.SYNC``s inside each loop of ``text`` (SASS), a loop being a branch back to a label above it."""
    lines = text.splitlines()
    labels: dict[str, int] = {}
    counts = []
    for i, line in enumerate(lines):
        if m := re.match(r"\s*(\.L_x_\d+):", line):
            labels[m.group(1)] = i
        if (m := re.search(r"\bBRA\b.*`\((\.L_x_\d+)\)", line)) and m.group(1) in labels:
            counts.append(sum("BAR.SYNC" in body for body in lines[labels[m.group(1)] : i]))
    return counts


def compile_error(label: str, exc: Exception) -> str:
    """A failed compile as one line: ``label``, the error's type and its message's last two lines (not the
    caret lines under the source)."""
    said = [line for line in str(exc).splitlines() if line.strip(" ^")]
    return f"{label}: {type(exc).__name__}: {' | '.join(said[-2:])}"


def run_in_child(test_file: str, function: str, timeout: float = 600) -> tuple[bool, str]:
    """``function()`` of the test module ``test_file`` in a child process without ``TRITON_INTERPRET`` (under
    it ``triton.jit`` gives interpreted functions, which do not compile), with the module's folder, the folder
    above it (the test suite's shared helpers, ``support``) and the package's ``src`` on its path. It returns a
    list of failures; the child prints them. Returns whether the list was empty, and what the child printed."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    folder = os.path.dirname(os.path.abspath(test_file))
    module = os.path.splitext(os.path.basename(test_file))[0]
    src = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([folder, os.path.dirname(folder), src])
    code = f"import {module} as t; f = t.{function}(); print('\\n'.join(f)); raise SystemExit(len(f) > 0)"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=timeout)
    return done.returncode == 0, done.stdout + done.stderr[-3000:]

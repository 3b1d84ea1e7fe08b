"""Compile a Triton kernel for a GPU target on a machine without one (``triton.compile`` of an ``ASTSource``):
what the front end and the backend make of a specialization the launcher produces, which the interpreter
does not check (it runs the Python, with no constexpr specialization and no types)."""

from __future__ import annotations

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
):
    """``fn`` compiled for ``sm_<arch>``: arguments typed by ``types`` (Triton type names; others ``i32``),
    ``constexprs`` by value, ``ones`` the integer arguments equal to 1 (which Triton specializes to the
    constant), ``div16`` those marked 16-divisible (pointers and strides a launch would see aligned)."""
    names = list(fn.arg_names)
    ones = list(ones)
    sig = {n: types.get(n, "i32") for n in names}
    sig.update({n: "constexpr" for n in (*constexprs, *ones)})
    consts = {(names.index(k),): v for k, v in constexprs.items()} | {(names.index(k),): 1 for k in ones}
    attrs = {(names.index(n),): [["tt.divisibility", 16]] for n in div16}
    options = {"num_warps": num_warps} | ({"num_stages": num_stages} if num_stages else {})
    source = ASTSource(fn, sig, constexprs=consts, attrs=attrs)
    return triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)

"""Plain-torch stand-ins for the few compiled vLLM ops a tiny model touches, for a vLLM unpacked from its Python
files alone, without its compiled extension (scripts/vllm_wheels.sh). Not part of the library.

``prepare(site)`` unpacks vLLM's Python files into ``site`` and writes there:

- ``vllm/_C_stable_libtorch.py``, which vLLM's CUDA platform imports at start: it calls :func:`register_ops`,
  defining ``torch.ops._C.{silu_and_mul, gelu_and_mul, gelu_tanh_and_mul, rms_norm, fused_add_rms_norm,
  rotary_embedding}`` in plain torch (CUDA and CPU), with their out-argument conventions (``CALLS`` counts
  them), the CUTLASS capability queries vLLM asks at import, answered False, and a stub for every other
  ``torch.ops._C`` op that vLLM's modules name outside a function (its fusion passes' pattern tables):
  the name resolves, a call raises;
- ``vllm/vllm_flash_attn/__init__.py``: a placeholder without the flash-attention extensions (the run uses
  the Triton attention backend; vLLM's modules import the names at start);
- ``xgrammar/``: a placeholder module when xgrammar is not installed (vLLM's structured-output module names
  its classes at import; the run never builds a grammar);
- ``exactfuse-<version>.dist-info``: exactfuse's ``vllm.general_plugins`` entry point, for a tree that runs
  from ``src/`` without being installed (an installed exactfuse declares it itself).
"""

from __future__ import annotations

import ast
import collections
import importlib.util
import re
import sys
import tarfile
from pathlib import Path

import torch
import torch.nn.functional as F

CALLS: collections.Counter = collections.Counter()
_LIB = None


def _rms(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    xf = x.float()
    y = (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype)
    return y if weight is None else y * weight


def _rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, neox: bool) -> torch.Tensor:
    """x ``[T, H, R]`` rotated by angle tables ``[T, 1, R/2]`` (fp32); neox: halves, else pairs."""
    xf = x.float()
    if neox:
        a, b = xf.chunk(2, dim=-1)
        return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1).to(x.dtype)
    a, b = xf[..., 0::2], xf[..., 1::2]
    return torch.stack([a * cos - b * sin, b * cos + a * sin], dim=-1).flatten(-2).to(x.dtype)


def import_time_names(root: Path) -> list[str]:
    """The ``torch.ops._C.<name>`` attributes read outside any function in the modules under ``root``, with
    ``<name>.<overload>`` for each ``torch.ops._C.<name>.<overload>`` read there and each
    ``"_C::<name>.<overload>"`` string there (``vllm/_custom_ops.py`` registers fake kernels for them at import
    once ``<name>`` resolves, which needs the overload too). A read under ``if hasattr(torch.ops._C, "<name>")``
    names nothing: vLLM probes for that kernel, and leaving it undefined answers as a build without it."""
    names = set()

    def probed(test: ast.AST) -> set[str]:  # the X of each hasattr(torch.ops._C, "X") the test requires
        terms = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
        return {
            n.args[1].value
            for n in terms
            if isinstance(n, ast.Call) and ast.unparse(n.func) == "hasattr" and len(n.args) == 2
            and ast.unparse(n.args[0]) == "torch.ops._C" and isinstance(n.args[1], ast.Constant)
        }  # fmt: skip

    def visit(node: ast.AST, guarded: frozenset = frozenset()) -> None:
        if isinstance(node, ast.If):
            visit(node.test, guarded)
            for child in node.body:
                visit_node(child, guarded | probed(node.test))
            for child in node.orelse:
                visit_node(child, guarded)
            return
        for child in ast.iter_child_nodes(node):
            visit_node(child, guarded)

    def visit_node(child: ast.AST, guarded: frozenset) -> None:
        if isinstance(child, ast.Lambda):
            return
        if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for decorator in child.decorator_list:
                visit(ast.Expression(decorator), guarded)
            return
        if isinstance(child, ast.Attribute) and ast.unparse(child.value) == "torch.ops._C":
            if child.attr not in guarded:
                names.add(child.attr)
        elif (
            isinstance(child, ast.Attribute)
            and isinstance(child.value, ast.Attribute)
            and ast.unparse(child.value.value) == "torch.ops._C"
            and child.value.attr not in guarded
            and child.attr != "default"
            and not child.attr.startswith("_")
            and not hasattr(torch._ops.OpOverloadPacket, child.attr)
        ):
            names.add(f"{child.value.attr}.{child.attr}")
        if isinstance(child, ast.Constant) and isinstance(child.value, str):
            qualified = re.fullmatch(r"_C::(\w+)\.(\w+)", child.value)
            if qualified and qualified[2] != "default" and qualified[1] not in guarded:
                names.add(f"{qualified[1]}.{qualified[2]}")
        visit(child, guarded)

    for path in sorted(root.rglob("*.py")):
        try:
            visit(ast.parse(path.read_text()))
        except (SyntaxError, UnicodeDecodeError):
            continue
    return sorted(names)


def register_ops(stubs: tuple[str, ...] = ()) -> None:
    """Define the ``_C`` ops (once per process); ``stubs``: names to define as ops that raise when called."""
    global _LIB
    if _LIB is not None:
        return
    lib = torch.library.Library("_C", "DEF")
    lib.define("silu_and_mul(Tensor(a!) out, Tensor input) -> ()")
    lib.define("gelu_and_mul(Tensor(a!) out, Tensor input) -> ()")
    lib.define("gelu_tanh_and_mul(Tensor(a!) out, Tensor input) -> ()")
    lib.define("rms_norm(Tensor(a!) result, Tensor input, Tensor? weight, float epsilon) -> ()")
    lib.define("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor? weight, float epsilon) -> ()")
    lib.define(
        "rotary_embedding(Tensor positions, Tensor(a!) query, Tensor(b!)? key, int head_size, Tensor cos_sin_cache, "
        "bool is_neox, int rope_dim_offset=0, bool inverse=False) -> ()"
    )

    def act(name, fn):
        def impl(out, x):
            CALLS[name] += 1
            d = x.shape[-1] // 2
            out.copy_(fn(x[..., :d]) * x[..., d:])

        for key in ("CUDA", "CPU"):
            lib.impl(name, impl, key)

    act("silu_and_mul", F.silu)
    act("gelu_and_mul", F.gelu)
    act("gelu_tanh_and_mul", lambda g: F.gelu(g, approximate="tanh"))

    def rms_norm(result, x, weight, eps):
        CALLS["rms_norm"] += 1
        result.copy_(_rms(x, weight, eps))

    def fused_add_rms_norm(x, residual, weight, eps):
        CALLS["fused_add_rms_norm"] += 1
        residual.copy_((x.float() + residual.float()).to(x.dtype))
        x.copy_(_rms(residual, weight, eps))

    def rotary_embedding(positions, query, key, head_size, cache, is_neox, offset=0, inverse=False):
        CALLS["rotary_embedding"] += 1
        rot = cache.shape[-1]
        cos, sin = cache.float().index_select(0, positions.flatten().long()).chunk(2, dim=-1)
        cos, sin = cos[:, None], (-sin if inverse else sin)[:, None]
        for t in (query, key):
            if t is None:
                continue
            heads = t.view(positions.numel(), -1, head_size)
            part = heads[..., offset : offset + rot]
            part.copy_(_rotate(part, cos, sin, is_neox))

    # capability queries vLLM asks at import time: no CUTLASS kernels here
    for name in ("cutlass_scaled_mm_supports_fp8", "cutlass_scaled_mm_supports_block_fp8",
                 "cutlass_scaled_mm_supports_fp4", "cutlass_group_gemm_supported"):  # fmt: skip
        lib.define(f"{name}(int cuda_device_capability) -> bool")
        lib.impl(name, lambda capability: False, "CompositeExplicitAutograd")
    for key in ("CUDA", "CPU"):
        lib.impl("rms_norm", rms_norm, key)
        lib.impl("fused_add_rms_norm", fused_add_rms_norm, key)
        lib.impl("rotary_embedding", rotary_embedding, key)
    for name in sorted({n.split(".")[0] for n in stubs}):  # an overload's op must resolve too
        if not hasattr(torch.ops._C, name):
            lib.define(f"{name}(Tensor[] args) -> ()")
            lib.impl(name, _stub(name), "CompositeExplicitAutograd")
    defined = {op.removeprefix("_C::") for op in lib._op_defs}
    for overload in (n for n in stubs if "." in n and n not in defined):
        lib.define(f"{overload}(Tensor[] args) -> ()")
        lib.impl(overload, _stub(overload), "CompositeExplicitAutograd")
    _LIB = lib


def _stub(name: str):
    def call(args):
        raise RuntimeError(f"torch.ops._C.{name}: vLLM's compiled extension is not on this machine")

    return call


XGRAMMAR_PLACEHOLDER = '''"""Placeholder for xgrammar: names resolve, building anything raises."""
__version__ = "0.0.0"


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def fail(*args, **kwargs):
        raise RuntimeError(f"xgrammar.{name}: xgrammar is not installed on this machine")

    return type(name, (), {"__init__": fail, "__init_subclass__": classmethod(lambda cls, **kw: None)})
'''


FLASH_ATTN_PLACEHOLDER = '''"""Placeholder for vllm.vllm_flash_attn without its CUDA extensions."""
FA2_AVAILABLE = FA3_AVAILABLE = False


def is_fa_version_supported(*args, **kwargs):
    return False


def fa_version_unsupported_reason(*args, **kwargs):
    return "the flash attention extensions are not on this machine"


def _missing(*args, **kwargs):
    raise RuntimeError("vllm.vllm_flash_attn: the flash attention extensions are not on this machine")


flash_attn_varlen_func = get_scheduler_metadata = _missing
compile_flash_attn_varlen_func_from_specs = _missing
'''


def prepare(site: Path, archive: Path, exactfuse_version: str = "0.1.0") -> Path:
    """Unpack ``archive`` (vLLM's Python files) into ``site`` once and write the stand-ins; returns ``site``."""
    site.mkdir(parents=True, exist_ok=True)
    if not (site / "vllm" / "__init__.py").exists():
        with tarfile.open(archive) as tar:
            tar.extractall(site, filter="data")
    (site / "vllm" / "_C_stable_libtorch.py").write_text(
        '"""Stand-in for the compiled extension (scripts/gpu/vllm_standin.py)."""\n'
        f"from vllm_standin import register_ops\n\nregister_ops({tuple(import_time_names(site / 'vllm'))!r})\n"
    )
    (site / "vllm" / "vllm_flash_attn" / "__init__.py").write_text(FLASH_ATTN_PLACEHOLDER)
    if importlib.util.find_spec("xgrammar") is None:
        (site / "xgrammar").mkdir(exist_ok=True)
        (site / "xgrammar" / "__init__.py").write_text(XGRAMMAR_PLACEHOLDER)
    info = site / f"exactfuse-{exactfuse_version}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: exactfuse\nVersion: {exactfuse_version}\n")
    entry = "exactfuse = exactfuse.integrations.vllm:register"
    (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{entry}\n")
    return site


if __name__ == "__main__":  # python scripts/gpu/vllm_standin.py SITE ARCHIVE: prepare a site by hand
    print(prepare(Path(sys.argv[1]), Path(sys.argv[2])))

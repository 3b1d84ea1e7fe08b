"""AOTInductor: torch.export with a dynamic token dimension, then aoti_compile_and_package of an MLP around
gelu_and_mul_sparse; the package must hold the projections and exactfuse's kernel, and load and run where
this torch can load any package (the ``aoti_load`` test; docs/compiler.md)."""

from __future__ import annotations

import re
import zipfile

import pytest
import torch

import exactfuse

op = exactfuse.get("gelu_and_mul_sparse")


class _SparseMLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.up_proj = torch.nn.Linear(32, 256, bias=False)
        self.act = exactfuse.GeluAndMulSparse(0.95)
        self.down_proj = torch.nn.Linear(128, 16, bias=False)

    def forward(self, x):
        return self.down_proj(self.act(self.up_proj(x)))


def _package(tmp_path) -> tuple[torch.nn.Module, str]:
    """The MLP exported with a dynamic token dimension and compiled into an AOTInductor package: (model, path)."""
    model = _SparseMLP().to("cuda", torch.bfloat16).eval()
    example = torch.randn(8, 32, dtype=torch.bfloat16, device="cuda")
    tokens = torch.export.Dim("tokens", min=1, max=65536)
    exported = torch.export.export(model, (example,), dynamic_shapes=({0: tokens},))
    return model, torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "sparse_mlp.pt2"))


@pytest.mark.gpu
def test_gpu_aot_inductor_keeps_the_projection_and_the_kernel(tmp_path):
    """torch.export + AOTInductor with a dynamic token dimension: the package's generated code holds the
    projections and exactfuse's kernel."""
    _, package = _package(tmp_path)
    with zipfile.ZipFile(package) as archive:
        sources = [n for n in archive.namelist() if n.endswith((".cpp", ".py", ".h"))]
        code = "\n".join(archive.read(n).decode(errors="replace") for n in sources)
    assert "gelu_and_mul_sparse" in code, "exactfuse's kernel is not in the package's generated code"
    assert re.search(r"\b(mm|addmm|bmm)\b|_mm_out|cublas", code), "the projections are not in the generated code"


@pytest.mark.gpu
@pytest.mark.aoti_load
def test_gpu_aot_package_loads_and_runs_at_every_token_count(tmp_path):
    """The package loaded with aoti_load_package runs at three T as eager does. Marked ``aoti_load``: a torch
    that cannot load any AOTInductor package crashes its process here (the GPU suite runs these tests only
    where scripts/gpu/probe_aoti_load.py's package without exactfuse loads, and reports them otherwise)."""
    model, package = _package(tmp_path)
    loaded = torch._inductor.aoti_load_package(package)
    for T in (5, 300, 4096):
        x = torch.randn(T, 32, dtype=torch.bfloat16, device="cuda")
        with torch.no_grad():
            projected = model.up_proj(x)
            reference = model.down_proj(op.native(projected, model.act.std_multiplier, "tanh"))
            out = loaded(x)
        assert out.shape == (T, 16) and not out.isnan().any()
        torch.testing.assert_close(out, reference)

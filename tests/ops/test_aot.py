"""AOTInductor: torch.export with a dynamic token dimension, then aoti_compile_and_package of an MLP around
gelu_and_mul_sparse; the package must hold the projections and exactfuse's kernel, and load and run where
this torch can load any package (docs/compiler.md)."""

from __future__ import annotations

import re
import subprocess
import sys
import zipfile
from pathlib import Path

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


def _start_aoti_control() -> subprocess.Popen:
    """The same export -> compile -> load -> call for an MLP without exactfuse, in its own process
    (scripts/gpu/probe_aoti_load.py plain), started first so that it builds beside the test's package:
    whether this torch can load any AOTInductor package here."""
    script = Path(__file__).resolve().parents[2] / "scripts" / "gpu" / "probe_aoti_load.py"
    return subprocess.Popen(
        [sys.executable, str(script), "plain"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _aoti_control_loads(proc: subprocess.Popen) -> tuple[bool, str]:
    stdout, stderr = proc.communicate(timeout=600)
    summary = [ln for ln in stdout.splitlines() if ln.startswith(("OK", "CRASH", "FAIL", "TIMEOUT"))]
    loads = proc.returncode == 0 and bool(summary) and summary[-1].startswith("OK")
    return loads, " / ".join(summary)[:400] or stderr[-400:]


@pytest.mark.gpu
def test_gpu_aot_inductor_keeps_the_projection_and_the_kernel(tmp_path):
    """torch.export + AOTInductor with a dynamic token dimension: the package holds the
    projections and exactfuse's kernel; loaded (where this torch can load packages), it runs at two T."""
    control = _start_aoti_control()
    try:
        model = _SparseMLP().to("cuda", torch.bfloat16).eval()
        example = torch.randn(8, 32, dtype=torch.bfloat16, device="cuda")
        tokens = torch.export.Dim("tokens", min=1, max=65536)
        exported = torch.export.export(model, (example,), dynamic_shapes=({0: tokens},))
        package = torch._inductor.aoti_compile_and_package(exported, package_path=str(tmp_path / "sparse_mlp.pt2"))
        with zipfile.ZipFile(package) as archive:
            sources = [n for n in archive.namelist() if n.endswith((".cpp", ".py", ".h"))]
            code = "\n".join(archive.read(n).decode(errors="replace") for n in sources)
        assert "gelu_and_mul_sparse" in code, "exactfuse's kernel is not in the package's generated code"
        assert re.search(r"\b(mm|addmm|bmm)\b|_mm_out|cublas", code), "the projections are not in the generated code"
        loads, why = _aoti_control_loads(control)
        if not loads:
            pytest.skip(f"aoti_load_package fails here without exactfuse too (scripts/gpu/probe_aoti_load.py): {why}")
        loaded = torch._inductor.aoti_load_package(package)
        for T in (5, 300, 4096):
            x = torch.randn(T, 32, dtype=torch.bfloat16, device="cuda")
            with torch.no_grad():
                projected = model.up_proj(x)
                reference = model.down_proj(op.native(projected, model.act.std_multiplier, "tanh"))
                out = loaded(x)
            assert out.shape == (T, 16) and not out.isnan().any()
            torch.testing.assert_close(out, reference)
    finally:
        if control.poll() is None:  # the test failed before reading it
            control.kill()
            control.communicate()

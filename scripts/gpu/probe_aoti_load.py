"""AOTInductor export -> aoti_compile_and_package -> aoti_load_package -> call, each model in its own process so
that a crash is reported, not fatal: ``plain`` (an MLP with an eager-PyTorch GELU-and-mul, in a process that never
imports exactfuse), ``silu`` (exactfuse's silu_and_mul), ``sparse`` (gelu_and_mul_sparse). ``plain`` is
tests/ops/test_aot.py's control: where it crashes too, the crash is the torch build's, not exactfuse's
(benchmarks/results/h200/sweeps/aoti_load_crash.txt). ``AOTI_STEP_TIMEOUT`` (240 s) a step."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time

import torch


def build(kind: str) -> torch.nn.Module:
    act = None
    if kind != "plain":  # the plain step's process never imports exactfuse
        import exactfuse

        act = {"silu": exactfuse.SiluAndMul(), "sparse": exactfuse.GeluAndMulSparse(0.95)}[kind]

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.up_proj = torch.nn.Linear(32, 256, bias=False)
            self.down_proj = torch.nn.Linear(128, 16, bias=False)
            self.act = act

        def forward(self, x):
            h = self.up_proj(x)
            if self.act is None:
                h = torch.nn.functional.gelu(h[..., :128], approximate="tanh") * h[..., 128:]
            else:
                h = self.act(h)
            return self.down_proj(h)

    return MLP().to("cuda", torch.bfloat16).eval()


def step(kind: str) -> None:
    torch.manual_seed(0)
    model = build(kind)
    example = torch.randn(8, 32, dtype=torch.bfloat16, device="cuda")
    tokens = torch.export.Dim("tokens", min=1, max=4096)
    exported = torch.export.export(model, (example,), dynamic_shapes=({0: tokens},))
    with tempfile.TemporaryDirectory() as tmp:
        print(f"step {kind}: exported", flush=True)
        package = torch._inductor.aoti_compile_and_package(exported, package_path=f"{tmp}/{kind}.pt2")
        print(f"step {kind}: compiled", flush=True)
        loaded = torch._inductor.aoti_load_package(package)
        print(f"step {kind}: loaded", flush=True)
        for T in (5, 300):
            x = torch.randn(T, 32, dtype=torch.bfloat16, device="cuda")
            with torch.no_grad():
                out, ref = loaded(x), model(x)
            err = (out.float() - ref.float()).abs().max().item()
            print(f"step {kind}: T={T} max abs diff vs eager {err:.3g}", flush=True)


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        step(sys.argv[2])
        return
    kinds = sys.argv[1:] or ["plain", "sparse", "silu"]
    limit = float(os.environ.get("AOTI_STEP_TIMEOUT", "240"))
    for kind in kinds:
        start = time.time()
        with tempfile.TemporaryFile("w+") as log:  # the child's output survives a timeout
            argv = [sys.executable, "-X", "faulthandler", __file__, "--child", kind]
            proc = subprocess.Popen(argv, stdout=log, stderr=log)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                proc.kill()
                rc = None
            log.seek(0)
            text = log.read()
        lines = [ln for ln in text.splitlines() if ln.startswith("step ")]
        print("\n".join(lines))
        took = f"{time.time() - start:.0f} s"
        if rc == 0:
            print(f"OK {kind} ({took})")
        elif rc is None:
            print(f"TIMEOUT {kind} after {took}; output tail: {text[-600:]}")
        else:
            tag = "CRASH" if rc < 0 else "FAIL"
            print(f"{tag} {kind}: rc {rc} ({took}); output tail: {text[-1200:]}")


if __name__ == "__main__":
    main()

"""``import exactfuse`` loads no harness: the test kit, the bench and the ops' cases (inputs, grids, cost) and
peers modules load on first use (``registry.load_declarations``, ``bench.peers.peers_for``), while
``exactfuse.warmup`` keeps its hooks."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HARNESS = "('exactfuse.bench', 'exactfuse.testing')"
DECLARATIONS = "m.startswith(('exactfuse.testing.cases', 'exactfuse.bench.peers'))"
FAMILIES = ("act_and_mul", "conv", "gelu_and_mul_sparse", "moe_silu_and_mul", "sparse_paged_attention", "w4a16")
CASE_MODULES = sorted((*FAMILIES, "conv_grids"))  # a family past 400 lines keeps its grids in <family>_grids.py
PEER_FAMILIES = ("act_and_mul", "conv", "sparse_paged_attention", "w4a16")


def _run(script: str, interpret: bool) -> list:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("interpret", [False, True], ids=["plain", "interpreter"])
def test_import_loads_no_harness_and_no_declarations(interpret):
    script = (
        "import sys, json, exactfuse;"
        f"print(json.dumps([sorted(m for m in sys.modules if m.startswith({HARNESS}) or {DECLARATIONS}),"
        " sorted(op.name for op in exactfuse.OPS.values() if op.warmup_fn is None)]))"
    )
    loaded, without_warmup = _run(script, interpret)
    assert loaded == []
    assert without_warmup == []  # every op's warmup hook is declared beside its launcher


def test_inputs_grids_cost_and_peers_load_on_first_use():
    script = (
        "import sys, json, torch, exactfuse;"
        "op = exactfuse.get('silu_and_mul');"
        f"before = sorted(m for m in sys.modules if {DECLARATIONS});"
        "grids = sorted(op.grids); cost = op.bytes_fn is not None;"
        "cases = len(op.cases('cpu', torch.float32, quick=True));"
        f"after = sorted(m for m in sys.modules if {DECLARATIONS});"
        "from exactfuse.bench.peers import peers_for; peers_for('silu_and_mul');"
        f"every = sorted(m for m in sys.modules if {DECLARATIONS});"
        "print(json.dumps([before, grids, cost, cases > 0, after, every]))"
    )
    before, grids, cost, cases, after, every = _run(script, interpret=True)
    assert before == [] and grids == ["default", "quick"] and cost and cases
    assert after == ["exactfuse.testing.cases", *(f"exactfuse.testing.cases.{f}" for f in CASE_MODULES)]
    peers = ["exactfuse.bench.peers", *(f"exactfuse.bench.peers.{f}" for f in PEER_FAMILIES)]
    assert every == sorted(peers + after)  # the peers load with the bench alone

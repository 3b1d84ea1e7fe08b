"""The README's first example runs as written, on the CPU, in a fresh process (the CLI and the test suite
set TRITON_INTERPRET; a user's script does not)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"


def test_the_first_readme_example_runs_on_the_cpu():
    code = re.search(r"```python\n(.*?)```", README.read_text(), re.S).group(1)
    assert 'device="cuda"' not in code, "the README's first example must run without a GPU"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"} | {"CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "native"

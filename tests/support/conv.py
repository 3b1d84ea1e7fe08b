"""Case selection shared by the conv family's interpreter tests (``tests/ops/test_short_conv.py``,
``tests/ops/test_conv_tiles.py``), and the error ratio of the FLA tests they reproduce
(``tests/ops/test_conv_fla.py``, ``tests/ops/test_conv_fla_initial_state.py``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

import torch

from exactfuse.ops.conv.warmup import LAYOUTS
from exactfuse.registry import Case


def one_layout(cases: Iterable[Case], turn: int = 0) -> Iterator[Case]:
    """Each case declared in both state layouts (an id with ``-cw-`` or ``-wc-``) in one of them: by turns
    among the cases of its mode (the id's first word), the first in ``LAYOUTS[turn]``, so that turns 0 and
    1 together run every case once. Cases without a state all run. A layout is a pair of state strides,
    and each one still serves every mode, on half its cases."""
    turns: dict[str, dict[str, int]] = {}
    for case in cases:
        layout = next((name for name in LAYOUTS if f"-{name}-" in case.id), None)
        if layout is None:
            yield case
            continue
        mode = turns.setdefault(case.id.split("-", 1)[0], {})
        index = mode.setdefault(case.id.replace(f"-{layout}-", "-"), len(mode))
        if layout == LAYOUTS[(index + turn) % len(LAYOUTS)]:
            yield case


FLA_DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
FLA_RATIO = 1e-3  # FLA's tests' bound on the error ratio (fla.utils.assert_close)


def err_ratio(ref: torch.Tensor, got: torch.Tensor) -> float:
    """FLA's error ratio: ``rms(ref - got) / rms(ref)``, in float64."""
    ref, got = ref.detach().double(), got.detach().double()
    return float((ref - got).square().mean().sqrt() / (ref.square().mean().sqrt() + 1e-15))

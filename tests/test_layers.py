"""The layers' helpers on a machine without a GPU."""

from __future__ import annotations

import pytest
import torch

from exactfuse.layers.conv import allocate_conv_state


@pytest.mark.parametrize("layout", ["cw", "wc"])
def test_conv_state_without_a_device_is_allocated_where_cuda_is_or_on_the_cpu(layout, monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    state = allocate_conv_state(3, 16, 4, torch.float16, layout)
    assert state.device.type == "cpu" and state.shape == (3, 16, 4) and not state.any()
    assert state.stride(-1 if layout == "cw" else 1) == 1  # "wc": the channels innermost


def test_a_cuda_conv_state_without_a_gpu_is_an_error_naming_the_argument(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match="allocate_conv_state: device is 'cuda', but no CUDA GPU is available"):
        allocate_conv_state(3, 16, 4, torch.float16, device="cuda")

"""The conv ops' refusals: an argument they cannot take, or a combination they do not support, is an error
that names it, raised before any state is written."""

import pytest
import torch

from exactfuse.ops.conv import causal_conv1d, causal_conv1d_update
from exactfuse.testing import make_generator

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")


def randn(shape, dtype, gen):
    return torch.randn(shape, generator=gen).to(dtype).to(DEVICE)


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (lambda a: causal_conv1d(a["x"], a["w"], query_start_loc=a["qsl"].float()), TypeError, "query_start_loc"),
        (
            lambda a: causal_conv1d(
                a["x"], a["w"], conv_state=a["s"], query_start_loc=a["qsl"], state_indices=a["sid"][:1]
            ),
            ValueError,
            r"state_indices must be \[R\] = \[2\] \(len\(query_start_loc\) - 1\) or longer",
        ),
        (
            lambda a: causal_conv1d(
                a["x"],
                a["w"],
                conv_state=a["s"],
                state_indices=a["sid"],
                pad_slot_id=-1,
                null_block_id=0,
                query_start_loc=a["qsl"],
            ),
            ValueError,
            "pad_slot_id=-1 and null_block_id=0",
        ),
        (lambda a: causal_conv1d_update(a["x"], a["s"], a["w"], history_at="last"), ValueError, "history_at must be"),
        (
            lambda a: causal_conv1d_update(
                a["x"][:4].view(2, 2, 8), a["s"][:2], a["w"], history_at="end", num_accepted_tokens=a["sid"]
            ),
            ValueError,
            "history_at='end'.*num_accepted_tokens",
        ),
        (
            lambda a: causal_conv1d(
                a["x"], a["w"], conv_state=a["s"], query_start_loc=a["qsl"], seq_idx=a["qsl"].new_zeros(6)
            ),
            ValueError,
            "seq_idx .* takes no conv_state",
        ),
        (lambda a: causal_conv1d(a["x"], a["w"], seq_idx=a["qsl"].new_zeros(5)), ValueError, r"seq_idx must be \[T\]"),
        (lambda a: causal_conv1d(a["x"], a["w"], seq_idx=a["qsl"].new_zeros(6).long()), TypeError, "seq_idx must be"),
        # weight: x's dtype or fp32 (Dao's convention); bias: the weight's dtype
        (lambda a: causal_conv1d(a["x"].half(), a["w"].bfloat16()), TypeError, "weight must be float16 or float32"),
        (lambda a: causal_conv1d(a["x"].half(), a["w"], a["w"][:, 0].half()), TypeError, "bias must be float32"),
    ],
    ids=[
        *("qsl-float", "short-indices", "two-pad-ids", "history-at", "end-with-spec", "seq-idx-with-state"),
        *("seq-idx-length", "seq-idx-int64", "weight-bf16-x-fp16", "bias-not-weight-dtype"),
    ],
)
def test_bad_or_unsupported_input_is_a_named_error(call, error, message):
    gen = make_generator(16)
    a = {
        "x": randn((6, 8), torch.float32, gen),
        "w": randn((8, 3), torch.float32, gen),
        "s": randn((3, 8, 2), torch.float32, gen),
        "qsl": torch.tensor([0, 2, 6], dtype=torch.int32, device=DEVICE),
        "sid": torch.tensor([1, 2], dtype=torch.int32, device=DEVICE),
    }
    before = a["s"].clone()
    with pytest.raises(error, match=message):
        call(a)
    assert torch.equal(a["s"], before)

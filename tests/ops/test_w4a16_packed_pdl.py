"""When ``w4a16_gemm_packed``'s kernels are programmatic dependent launches (the first weights read before the
previous kernel of the stream has finished): after a kernel of the op's own, or on weights PyTorch has counted
no write to since the op last read them (``packed.weights_unchanged``); never on the first call on a weight or
the first after a write. On a GPU: a weight written just before the call is the weight the call reads, and the
dependent launch gives the plain launch's bits."""

from __future__ import annotations

import pytest
import torch

import exactfuse
from exactfuse.ops.w4a16 import fragment
from exactfuse.ops.w4a16.packing import random_weights


def _packed(K: int, N: int, device="cpu", seed: int = 0, act_order: bool = False):
    """A ``K x N`` layer (group 128, zero points) in the fragment layout: words, scales, zero words, perm."""
    gen = torch.Generator().manual_seed(seed)
    w = random_weights(K, N, torch.bfloat16, "cpu", gen, symmetric=False)
    perm = torch.randperm(K, generator=gen).to(torch.int32) if act_order else None
    return tuple(None if t is None else t.to(device) for t in fragment.pack(w.qweight, w.scales, w.zeros, perm))


def test_weights_unchanged_counts_every_write_pytorch_sees():
    """False on a tensor's first call and on the first after an in-place write, ``copy_``, a new tensor or a
    write said with ``weights_written``; True otherwise; every tensor's version recorded on each call; an
    inference tensor never."""
    from exactfuse.ops.w4a16.packed import weights_unchanged, weights_written

    words, scales = torch.zeros(4, dtype=torch.int32), torch.zeros(4)
    assert not weights_unchanged(words, scales, None)
    assert weights_unchanged(words, scales, None)
    words.add_(1)
    assert not weights_unchanged(words, scales, None)
    assert weights_unchanged(words, scales, None)
    with torch.no_grad():
        scales.copy_(torch.ones(4))
    assert not weights_unchanged(words, scales, None)
    assert weights_unchanged(words, scales, None)
    moved = words.clone()  # what .to() and load paths that rebuild a buffer give: a tensor never read here
    assert not weights_unchanged(moved, scales, None)
    assert weights_unchanged(moved, scales, None)
    words[0] = 7  # an indexed write counts as well
    assert not weights_unchanged(words, scales, None)
    assert weights_unchanged(words, scales, None)
    weights_written(scales)  # a write the counters cannot see, said
    assert not weights_unchanged(words, scales, None)
    other = torch.zeros(4)  # other scales with the same words: not what the last call read
    assert not weights_unchanged(words, other, None)
    assert weights_unchanged(words, other, None)
    assert not weights_unchanged(words, other, torch.zeros(1, dtype=torch.int32))
    with torch.inference_mode():
        frozen = torch.zeros(4, dtype=torch.int32)
    assert not weights_unchanged(frozen, scales, None)
    assert not weights_unchanged(frozen, scales, None)


def test_provider_launches_dependently_only_after_its_own_kernel_or_on_unchanged_weights(monkeypatch):
    """The mma.sync kernel: plain on a weight's first call and the first after a write to any of its three
    tensors, dependent otherwise, and always dependent after the act-order gather; the wgmma kernel (after its
    column gather): always dependent."""
    pytest.importorskip("triton.experimental.gluon")
    from exactfuse.ops.w4a16 import heuristics, packed

    taken = []
    monkeypatch.setattr(packed, "launch_packed", lambda a, *args, **cfg: taken.append(("kernel", cfg["pdl"])))
    monkeypatch.setattr(packed, "launch_packed_wgmma", lambda a, *args, **cfg: taken.append(("wgmma", cfg["pdl"])))
    words, scales, zeros, _ = _packed(256, 256)
    a = torch.zeros(4, 256, dtype=torch.float16)
    for write in (None, words, None, scales, zeros, None):
        if write is not None:
            write.add_(0)  # a write of the same values: still a write
        packed.w4a16_gemm_packed_gluon(a, words, scales, zeros)
    assert taken == [("kernel", p) for p in (False, False, True, False, False, True)]
    taken.clear()
    packed.w4a16_gemm_packed_gluon(a, *_packed(256, 256, seed=1, act_order=True))  # a first call, after the gather
    monkeypatch.setattr(heuristics, "PACKED_WGMMA_MIN_WEIGHTS", 256 * 256)  # the wgmma rule on this small layer
    packed.w4a16_gemm_packed_gluon(torch.zeros(64, 256, dtype=torch.float16), *_packed(256, 256, seed=2))
    assert taken == [("kernel", True), ("wgmma", True)]


class _LaunchRecorder:
    """Stands in for a Gluon kernel: records each launch's ``launch_pdl``, then launches."""

    def __init__(self, kernel):
        self.kernel, self.pdl = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.pdl.append(kwargs["launch_pdl"])
            return self.kernel[grid](*args, **kwargs)

        return launch


@pytest.mark.gpu
def test_gpu_a_weight_written_just_before_the_call_is_the_one_it_reads(monkeypatch):
    """Two layers' weights copied by turns into one set of tensors, each copy the kernel just before the op's:
    every call gives the bits of the op on fresh copies of the weights it was given (plain launches of a
    weight's first call), and the calls between the copies, dependent launches, the same bits again."""
    from exactfuse.ops.w4a16 import native, packed

    dev = torch.device("cuda")
    K, N = 2048, 512
    layers = [_packed(K, N, dev, seed) for seed in (0, 1)]
    a = torch.randn(4, K, device=dev, dtype=torch.bfloat16)
    # the spec's product is not the kernel's bits (the contract is Float64Relative), so each layer's expected
    # bits come from the op itself, a plain launch on a copy no other call has read
    expected = [packed.w4a16_gemm_packed_gluon(a, *(t.clone() for t in layer[:3])) for layer in layers]
    contract = exactfuse.get("w4a16_gemm_packed").contract
    for want, layer in zip(expected, layers, strict=True):
        res = contract.check(want, native.w4a16_gemm_packed(a, *layer[:3]), args=(a, *layer[:3]), kwargs={})
        assert res.passed, res.summary()
    assert not torch.equal(*expected)  # a stale read of the other layer's weights would show
    recorder = _LaunchRecorder(packed.w4a16_packed_kernel)
    monkeypatch.setattr(packed, "w4a16_packed_kernel", recorder)
    words, scales, zeros = (t.clone() for t in layers[0][:3])
    for turn in range(6):
        source = layers[turn % 2]
        for t, s in zip((words, scales, zeros), source[:3], strict=True):
            t.copy_(s)
        first = packed.w4a16_gemm_packed_gluon(a, words, scales, zeros)
        again = packed.w4a16_gemm_packed_gluon(a, words, scales, zeros)
        torch.cuda.synchronize()
        assert torch.equal(first, expected[turn % 2]), turn
        assert torch.equal(again, expected[turn % 2]), turn
    assert recorder.pdl == [False, True] * 6

"""Conv parity: the calling conventions of vLLM, Dao's causal-conv1d and FLA that ``causal_conv1d`` /
``causal_conv1d_update`` take without an adapter, for the native spec and the Triton provider (under
the interpreter on the CPU: fp16, fp32).

Each test builds its expectation with a reference written here from the peer's documented semantics,
one sequence at a time (``F.conv1d`` over ``history ‖ inputs`` in fp32, SiLU, one rounding), and holds
outputs to the peer's own tolerances and states to ``torch.equal`` (states are copies), as the peers'
tests do:

- vLLM, ``tests/kernels/mamba/test_causal_conv1d.py`` (``test_causal_conv1d_varlen``,
  ``test_causal_conv1d_update_with_batch_gather``): tolerances ``(rtol, atol)`` = ``(3e-4, 1e-3)`` fp32,
  ``(3e-3, 5e-3)`` fp16, ``(1e-2, 5e-2)`` bf16; ``conv_states [entries, dim, width - 1]`` stored
  channel-last (``[entries, width - 1, dim]`` transposed); padded requests carry the pad index and
  their states stay untouched. vLLM's current kernels take ``null_block_id = NULL_BLOCK_ID = 0``
  (``vllm/v1/attention/backends/utils.py``) and its tests draw real slots from ``1 ..`` (slot 0 is the
  null block); its CUDA-graph batches pass index arrays longer than the batch.
- Dao-AILab/causal-conv1d, ``tests/test_causal_conv1d.py`` (``test_causal_conv1d_update``,
  ``..._with_padding``): ``conv_state [batch, dim, state_len]`` with ``state_len`` drawn from
  ``width - 1 .. width + 9``, stored ``[batch, state_len, dim]`` transposed; the reference
  (``causal_conv1d_update_ref``, no ``cache_seqlens``) convolves ``cat(conv_state, x)`` and leaves the
  state as its last ``state_len`` columns; padded requests (index -1) give output exactly 0 and keep
  their state.
  ``test_causal_conv1d_varlen`` / ``..._varlen_padding``: ``seq_idx [batch, seqlen]`` int32 splits
  each row into sequences at 1 to 4 random cut points (numbered from 0 in each row, or counting on
  across rows), padding tokens at a row's end carry -1; the reference runs ``causal_conv1d_ref`` on
  each sequence alone and expects 0 at padding; ``seq_idx`` is taken without initial states. Every
  test there draws ``weight`` and ``bias`` in fp32 for fp16/bf16/fp32 ``x`` and ``conv_state``; the
  reference (``causal_conv1d_ref``, ``causal_conv1d_update_ref``) casts x to the weight's dtype,
  convolves with the bias, applies SiLU, and casts back once.
- FLA, ``tests/modules/test_conv.py``: ``cu_seqlens`` is int64 (``torch.LongTensor``).
"""

import itertools

import pytest
import torch

from exactfuse.integrations.hub import CausalConv1dUpdate
from exactfuse.ops.conv import causal_conv1d, causal_conv1d_update
from exactfuse.testing import make_generator
from exactfuse.utils import DTYPE_NAMES
from support.conv_parity import DEVICE, DTYPES, PROVIDERS, assert_close, pool, randn, reference, run


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("pad", ["null_block_id=0", "pad_slot_id=0", "pad_slot_id=-1"])
@pytest.mark.parametrize("qsl_dtype", [torch.int32, torch.int64], ids=["qsl32", "qsl64"])
def test_vllm_varlen_padding_and_graph_padded_indices(provider, dtype, pad, qsl_dtype):
    """vLLM's ``causal_conv1d_fn`` call: real slots from 1 (slot 0 the null block) or any slot with
    ``PAD_SLOT_ID = -1``, padded requests at the pad index, ``cache_indices`` and ``has_initial_state``
    longer than the batch (their tail names real slots, which must stay untouched), ``query_start_loc``
    int32 or int64. Outputs at the peer's tolerance, padded rows 0, states bit for bit."""
    gen = make_generator(11)
    C, K, slots = 24, 4, 12
    pad_id = -1 if pad.endswith("-1") else 0
    lengths = [5, 1, 7, 3, 9]
    R = len(lengths)
    qsl = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=qsl_dtype, device=DEVICE)
    x = randn((int(qsl[-1]), C), dtype, gen)
    weight, bias = randn((C, K), dtype, gen), randn((C,), dtype, gen)
    state = pool(slots, C, K - 1, dtype, "wc", gen)
    real = (torch.randperm(slots - 1, generator=gen)[: R + 3] + 1).tolist()
    padded = [1, 3]  # requests carrying the pad index
    sid = [pad_id if r in padded else real[r] for r in range(R)] + real[R : R + 3]  # 3 graph-padding entries
    state_indices = torch.tensor(sid, dtype=torch.int32, device=DEVICE)
    has_init = torch.tensor([True, False, True, True, False] + [True] * 3, device=DEVICE)
    before = state.clone()
    kw = {pad.split("=")[0]: pad_id}
    out = run(causal_conv1d, provider, x, weight, bias, activation="silu", conv_state=state, query_start_loc=qsl,
              state_indices=state_indices, has_initial_state=has_init, **kw)  # fmt: skip

    expected_state = before.clone()
    for r in range(R):
        rows = slice(int(qsl[r]), int(qsl[r + 1]))
        if r in padded:
            assert torch.equal(out[rows], torch.zeros_like(out[rows])), f"padded request {r} has output"
            continue
        s = sid[r]
        history = before[s] if has_init[r] else torch.zeros_like(before[s])
        ref, full = reference(x[rows], history, weight, bias, "silu")
        assert_close(out[rows], ref, dtype)
        expected_state[s] = full[:, -(K - 1) :]
    assert torch.equal(state, expected_state)  # the tail entries' slots and slot 0 included


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("Lq", [None, 3], ids=["BC", "BLqC"])
def test_vllm_update_null_block_and_longer_indices(provider, dtype, Lq):
    """vLLM's ``causal_conv1d_update``: requests at the null block 0 skipped (output 0, no state
    written), ``conv_state_indices`` longer than the batch with its tail naming real slots (untouched)."""
    gen = make_generator(12)
    B, C, K, slots = 6, 16, 3, 16
    shape = (B, C) if Lq is None else (B, Lq, C)
    x = randn(shape, dtype, gen)
    weight, bias = randn((C, K), dtype, gen), randn((C,), dtype, gen)
    state = pool(slots, C, K - 1, dtype, "cw", gen)
    real = (torch.randperm(slots - 1, generator=gen)[: B + 4] + 1).tolist()
    sid = [0 if b in (2, 5) else real[b] for b in range(B)] + real[B : B + 4]
    before = state.clone()
    out = run(causal_conv1d_update, provider, x, state, weight, bias, activation="silu",
              state_indices=torch.tensor(sid, dtype=torch.int32, device=DEVICE), null_block_id=0)  # fmt: skip
    expected_state = before.clone()
    for b in range(B):
        if sid[b] == 0:
            assert torch.equal(out[b], torch.zeros_like(out[b]))
            continue
        ref, full = reference(x[b].reshape(-1, C), before[sid[b]], weight, bias, "silu")
        assert_close(out[b], ref.reshape(out[b].shape), dtype)
        expected_state[sid[b]] = full[:, -(K - 1) :]
    assert torch.equal(state, expected_state)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("layout", ["cw", "wc"])
@pytest.mark.parametrize(("K", "extra"), [(4, 0), (4, 5), (2, 9), (3, 1)], ids=lambda v: str(v))
@pytest.mark.parametrize("Lq", [None, 1, 4, 5], ids=lambda v: f"Lq{v}")
def test_dao_wide_state_history_at_end(provider, dtype, layout, K, extra, Lq):
    """Dao's ``causal_conv1d_update`` without ``cache_seqlens``: ``state_len = width - 1 + extra``, the
    conv reads the last ``width - 1`` columns, the whole state becomes the last ``state_len`` columns of
    ``state ‖ x``; with ``conv_state_indices`` holding -1 for padded requests (output exactly 0, state
    untouched) and a pool 10x the batch."""
    gen = make_generator(13)
    B, C = 5, 16
    W = K - 1 + extra
    shape = (B, C) if Lq is None else (B, Lq, C)
    x = randn(shape, dtype, gen)
    weight = randn((C, K), dtype, gen)
    state = pool(10 * B, C, W, dtype, layout, gen)
    sid = torch.randperm(10 * B, generator=gen)[:B].tolist()
    sid[1] = sid[3] = -1
    before = state.clone()
    out = run(causal_conv1d_update, provider, x, state, weight, None, activation=None,
              state_indices=torch.tensor(sid, dtype=torch.int32, device=DEVICE), history_at="end")  # fmt: skip
    expected_state = before.clone()
    for b in range(B):
        if sid[b] == -1:
            assert torch.equal(out[b], torch.zeros_like(out[b]))
            continue
        ref, full = reference(x[b].reshape(-1, C), before[sid[b]], weight, None, None)
        assert_close(out[b], ref.reshape(out[b].shape), dtype)
        expected_state[sid[b]] = full[:, full.shape[1] - W :]
    assert torch.equal(state, expected_state)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("layout", ["cw", "wc"])
@pytest.mark.parametrize("K", [2, 3, 4])
@pytest.mark.parametrize("Lq", [None, 4, 5], ids=lambda v: f"Lq{v}")
@pytest.mark.parametrize("gather", [False, True], ids=["batch", "gather"])
def test_dao_circular_state_cache_seqlens(provider, dtype, layout, K, Lq, gather):
    """Dao's ``causal_conv1d_update`` with ``cache_seqlens`` (``test_causal_conv1d_update``, ``..._with_batch_
    gather``): the state ``[batch, dim, state_len]``, ``state_len`` drawn from ``width - 1 .. width + 9``, is a
    circular buffer; request ``b`` reads the ``width - 1`` positions before ``cache_seqlens[b]`` (modulo
    ``state_len``), oldest first, and its inputs are written at ``cache_seqlens[b] + i`` (modulo);
    ``cache_seqlens`` drawn from ``0 .. 1023`` (int32); weight and bias fp32 as there, outputs to Dao's
    tolerances, the state ``torch.equal``; with a gather, a pool 10x the batch and -1 for two padded
    requests (output 0, state untouched)."""
    gen = make_generator(17)
    B, C = 6, 16
    W = int(torch.randint(K - 1, K + 10, (1,), generator=gen))
    shape = (B, C) if Lq is None else (B, Lq, C)
    x = randn(shape, dtype, gen)
    weight = torch.randn((C, K), generator=gen).to(DEVICE)
    bias = torch.randn((C,), generator=gen).to(DEVICE)
    slots = 10 * B if gather else B
    state = pool(slots, C, W, dtype, layout, gen)
    sid = torch.randperm(slots, generator=gen)[:B].tolist() if gather else list(range(B))
    if gather:
        sid[1] = sid[4] = -1
    seqlens = torch.randint(0, 1024, (B,), generator=gen, dtype=torch.int32)
    before = state.clone()
    kwargs = {"state_indices": torch.tensor(sid, dtype=torch.int32, device=DEVICE)} if gather else {}
    out = run(causal_conv1d_update, provider, x, state, weight, bias, activation="silu",
              cache_seqlens=seqlens.to(DEVICE), **kwargs)  # fmt: skip
    expected_state = before.clone()
    for b in range(B):
        if sid[b] == -1:
            assert torch.equal(out[b], torch.zeros_like(out[b]))
            continue
        rows = x[b].reshape(-1, C)
        back = torch.remainder(torch.arange(-(K - 1), 0) + int(seqlens[b]), W)
        ref, _ = reference(rows, before[sid[b]][:, back], weight, bias, "silu")
        assert_close(out[b], ref.reshape(out[b].shape), dtype)
        at = torch.remainder(torch.arange(rows.shape[0]) + int(seqlens[b]), W)
        expected_state[sid[b]][:, at] = rows.T.to(dtype)
    assert torch.equal(state, expected_state)


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("extra", [0, 1, 3])
def test_prefill_history_at_end_varlen(provider, dtype, extra):
    """``causal_conv1d(..., history_at="end")`` over a pool of windows ``W = K - 1 + extra`` (FLA's ``W = K`` at
    ``extra = 1``): each request reads the last ``K - 1`` positions of its window (zeros without
    ``has_initial_state``), and a request with rows leaves its window as the last ``W`` entries of ``window ‖
    rows``; an empty request and a padded one (-1: output 0) leave theirs untouched."""
    gen = make_generator(23)
    K, C, lengths = 4, 16, (3, 0, 6, 1, 2)
    T, R = sum(lengths), len(lengths)
    W = K - 1 + extra
    x = randn((T, C), dtype, gen)
    weight = randn((C, K), dtype, gen)
    state = pool(3 * R, C, W, dtype, "cw", gen)
    sid = torch.randperm(3 * R, generator=gen)[:R].tolist()
    sid[3] = -1
    init = [True, True, False, True, False]
    qsl = torch.tensor([0, *itertools.accumulate(lengths)], dtype=torch.int32, device=DEVICE)
    before = state.clone()
    out = run(causal_conv1d, provider, x, weight, None, activation="silu", conv_state=state, query_start_loc=qsl,
              state_indices=torch.tensor(sid, dtype=torch.int32, device=DEVICE),
              has_initial_state=torch.tensor(init, device=DEVICE), history_at="end")  # fmt: skip
    expected = before.clone()
    for r, (a, n) in enumerate(zip(qsl[:-1].tolist(), lengths, strict=True)):
        if sid[r] == -1:
            assert torch.equal(out[a : a + n], torch.zeros_like(out[a : a + n]))
            continue
        if n == 0:  # no rows: nothing read, nothing written
            continue
        window = before[sid[r]] if init[r] else torch.zeros_like(before[sid[r]])
        ref, full = reference(x[a : a + n], window, weight, None, "silu")
        assert_close(out[a : a + n], ref, dtype)
        expected[sid[r]] = full[:, -W:]
    assert torch.equal(state, expected)


def test_cache_seqlens_refuses_what_it_cannot_combine():
    x, state, w = torch.randn(2, 3, 8), torch.randn(2, 8, 5), torch.randn(8, 4)
    seqlens = torch.zeros(2, dtype=torch.int32)
    with pytest.raises(ValueError, match="cache_seqlens .* takes neither num_accepted_tokens nor history_at='end'"):
        causal_conv1d_update(x, state, w, cache_seqlens=seqlens, history_at="end")
    with pytest.raises(ValueError, match="cache_seqlens must hold one entry per request"):
        causal_conv1d_update(x, state, w, cache_seqlens=seqlens[:1])


def packed_rows(seqlen: int, batch: int, gen, *, pad: bool, global_ids: bool):
    """Dao's ``seq_idx`` grid: each row cut into 1 to 4 sequences (a shorter true length with ``pad``,
    the rest -1). Returns ``seq_idx [batch, seqlen]`` and each row's sequence lengths."""
    ids, runs, counter = [], [], 0
    for _ in range(batch):
        true = int(torch.randint(seqlen // 2, seqlen, (1,), generator=gen)) if pad else seqlen
        cuts = torch.randperm(true - 1, generator=gen)[: int(torch.randint(1, 5, (1,), generator=gen))]
        bounds = [0, *sorted((cuts + 1).tolist()), true]
        lengths = [b - a for a, b in itertools.pairwise(bounds)]
        row = []
        for i, n in enumerate(lengths):
            row += [counter + i if global_ids else i] * n
        counter += len(lengths)
        ids.append(row + [-1] * (seqlen - true))
        runs.append(lengths)
    return torch.tensor(ids, dtype=torch.int32, device=DEVICE), runs


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("dtype", DTYPES, ids=DTYPE_NAMES.get)
@pytest.mark.parametrize("K", [2, 3, 4])
@pytest.mark.parametrize(("seqlen", "pad"), [(8, False), (65, False), (40, True)], ids=["L8", "L65", "L40-pad"])
def test_dao_seq_idx_packed_sequences(provider, dtype, K, seqlen, pad):
    """Dao's ``causal_conv1d_fn(x, weight, bias, seq_idx=...)`` over ``[batch, dim, seqlen]``, as
    ``causal_conv1d`` on the channel-last rows with one ``query_start_loc`` entry a row and ``seq_idx``
    flattened: each packed sequence equals the reference on it alone, padding rows are 0."""
    gen = make_generator(17 + K + seqlen)
    batch, C = 3, 24
    seq_idx, runs = packed_rows(seqlen, batch, gen, pad=pad, global_ids=pad)
    x = randn((batch * seqlen, C), dtype, gen)
    weight, bias = randn((C, K), dtype, gen), randn((C,), dtype, gen)
    qsl = torch.arange(batch + 1, dtype=torch.int32, device=DEVICE) * seqlen
    out = run(causal_conv1d, provider, x, weight, bias, activation="silu", query_start_loc=qsl,
              seq_idx=seq_idx.reshape(-1))  # fmt: skip
    for b in range(batch):
        start = b * seqlen
        for n in runs[b]:
            ref, _ = reference(x[start : start + n], x.new_zeros((C, K - 1)), weight, bias, "silu")
            assert_close(out[start : start + n], ref, dtype)
            start += n
        padding = out[start : (b + 1) * seqlen]
        assert torch.equal(padding, torch.zeros_like(padding))


def test_hub_update_is_dao_update():
    """transformers' ``causal_conv1d_update`` (Dao's semantics, ``[B, C, L]`` layout, ``W = K`` as the
    models allocate it) through the hub layer, which now calls ``history_at="end"``."""
    gen = make_generator(15)
    B, C, K, W = 3, 8, 4, 6
    x = randn((B, C, 2), torch.float32, gen)
    weight, bias = randn((C, K), torch.float32, gen), randn((C,), torch.float32, gen)
    state = randn((B, C, W), torch.float32, gen)
    before = state.clone()
    out = CausalConv1dUpdate()(x, state, weight, bias, activation="silu")
    for b in range(B):
        ref, full = reference(x[b].T, before[b], weight, bias, "silu")
        assert_close(out[b], ref.T, torch.float32)
        assert torch.equal(state[b], full[:, -W:])

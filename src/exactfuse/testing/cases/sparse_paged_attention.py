"""Inputs of sparse_paged_attention (shared by tests, ``verify`` and ``bench``), its benchmark grids and
roofline cost. The registry imports this module on first use (``registry.load_declarations``)."""

from __future__ import annotations

import functools

import torch

from exactfuse.ops.sparse_paged_attention import _sparse_paged_attention as op
from exactfuse.ops.sparse_paged_attention.native import FP8_DTYPES, physical_slots
from exactfuse.registry import Case, LazyCase
from exactfuse.testing.inputs import make_generator

FP8_SCALES = (0.5, 2.0)  # k_scale, v_scale: unequal, so a k/v swap fails the contract
_KV_NAMES = {torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2"}


def _randn(shape, gen, scale=1.0) -> torch.Tensor:
    return torch.randn(tuple(shape), generator=gen, dtype=torch.float32) * scale


def _split_rows(rows: int, reqs: int, empty_last: bool) -> list[int]:
    """Rows per request, in order; with ``empty_last`` the last request gets none."""
    takers = reqs - 1 if empty_last and reqs > 1 else reqs
    base, extra = divmod(rows, takers)
    sizes = [base + (i < extra) for i in range(takers)]
    return sizes + [0] * (reqs - takers)


def attention_case(
    case_id: str,
    rows: int,
    Hq: int,
    Hkv: int,
    D: int,
    page_size: int,
    W: int,
    *,
    dtype: torch.dtype,
    device,
    gen: torch.Generator,
    kv_dtype: torch.dtype | None = None,
    reqs: int | None = None,
    pages_per_req: int = 4,
    short_every: int = 3,
    empty_last: bool = True,
    padding: int = 0,
    holes: float = 0.1,
    overlap: float = 0.875,
    gate: str | None = "fused",
    counts: bool = False,
    kv_halves: bool = True,
    scale: float | None = None,
    distinct: bool = False,
) -> Case:
    """One call in the shape of a serving batch (serving-shaped selections: docs/sparse_attention.md, Tests).

    ``reqs`` requests (default ``max(2, rows // 64)``) own ``pages_per_req`` pages each, every
    ``short_every``-th request only its rows + 8 tokens, the last none with ``empty_last``; pages are a
    random permutation of the cache plus out-of-range and ``-1`` table entries past each request's
    pages. Each row selects ``W`` positions: ``overlap`` of them shared with its request's other rows,
    ``holes`` of them ``-1`` anywhere, a few past the block table. ``padding`` rows at the end map to an
    out-of-range request; with ``distinct`` a row's own positions are distinct, as a top-k selection's
    are (else drawn with repeats, which the op counts each time). K and V are the two halves of one
    ``[pages, page, Hkv, 2D]`` tensor with ``kv_halves``; ``kv_dtype`` float8 stores them as e4m3/e5m2
    with ``FP8_SCALES``.
    """
    kv_dtype = kv_dtype or dtype
    reqs = reqs or max(2, rows // 64)
    sizes = _split_rows(rows, reqs, empty_last)
    contexts = [s + 8 if short_every and i % short_every == short_every - 1 else pages_per_req * page_size
                for i, s in enumerate(sizes)]  # fmt: skip
    req_pages = [-(-c // page_size) for c in contexts]
    num_pages = sum(req_pages) + 1  # one spare page nobody's table names
    max_pages = max(req_pages) + 2
    perm = torch.randperm(num_pages, generator=gen)
    table = torch.full((reqs, max_pages), -1, dtype=torch.int32)
    used = 0
    for r, n in enumerate(req_pages):
        table[r, :n] = perm[used : used + n].to(torch.int32)
        table[r, n] = num_pages + 3 + r  # past the cache: entries landing there are no token
        used += n
    idx = torch.full((rows + padding, W), -1, dtype=torch.int32)
    token_to_req = torch.full((rows + padding,), reqs, dtype=torch.int32)  # padding: out of range
    row = 0
    for r, n in enumerate(sizes):
        shared = torch.randint(0, contexts[r], (W,), generator=gen)
        for _ in range(n):
            if distinct and contexts[r] >= W:
                own = torch.randperm(contexts[r], generator=gen)[:W]
            else:
                own = torch.randint(0, contexts[r], (W,), generator=gen)
            pick = torch.where(torch.rand((W,), generator=gen) < overlap, shared, own)
            pick = torch.where(torch.rand((W,), generator=gen) < holes, torch.full_like(pick, -1), pick)
            past = torch.rand((W,), generator=gen) < 0.01  # past the request's table: no token
            pick = torch.where(past, torch.full_like(pick, max_pages * page_size + 5), pick)
            idx[row], token_to_req[row] = pick.to(torch.int32), r
            row += 1
    if padding:
        token_to_req[rows::2] = -1  # both kinds of out-of-range request
        idx[rows:] = torch.randint(0, page_size, (padding, W), generator=gen).to(torch.int32)
    total = rows + padding
    q = _randn((total, Hq, D), gen).to(dtype)
    fp8 = kv_dtype in FP8_DTYPES
    scale_kv = 4.0 if fp8 else 1.0  # fp8 values spread over their range
    # the cache, the one large tensor (GBs at bench sizes), is drawn where it lives, seeded from ``gen``
    kv_gen = torch.Generator(device).manual_seed(int(torch.randint(2**62, (), generator=gen)))
    kv = torch.randn((num_pages, page_size, Hkv, 2 * D), generator=kv_gen, device=device)
    kv = (kv * scale_kv).to(kv_dtype)
    if kv_halves:
        k_cache, v_cache = kv[..., :D], kv[..., D:]
    else:
        k_cache, v_cache = kv[..., :D].contiguous(), kv[..., D:].contiguous()
    kwargs = {}
    args = [torch.full((total, Hq, D), float("nan"), dtype=dtype), q, k_cache, v_cache, idx, table, token_to_req]
    cnt = None
    if counts:
        cnt = torch.randint(0, W + 1, (total,), generator=gen).to(torch.int32)
        cnt[:2] = torch.tensor([0, W], dtype=torch.int32)[: min(2, total)]
    g = _randn((total, Hq, D), gen, 2.0).to(dtype) if gate else None
    args += [cnt, scale, g, gate or "fused", *(FP8_SCALES if fp8 else (None, None))]
    args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
    if kv_halves:  # .to(device) of a view copies only the view: rebuild the halves on the device
        kv = kv.to(device)
        args = (*args[:2], kv[..., :D], kv[..., D:], *args[4:])
    return Case(case_id, args, kwargs)


def _id(rows, Hq, Hkv, D, page, W, kv_dtype, extra="") -> str:
    kv = f"-{_KV_NAMES[kv_dtype]}" if kv_dtype in _KV_NAMES else ""
    return f"R{rows}-H{Hq}x{Hkv}-D{D}-P{page}-W{W}{kv}{extra}"


# (rows, Hq, Hkv, page): serving-shaped cases; W = 2048 + 3, D = 256 there.
UPSTREAM = ((1, 24, 2, 1600), (16, 12, 1, 1600), (32, 6, 1, 800), (128, 24, 2, 1568), (257, 6, 1, 800),
            (513, 6, 1, 784), (700, 6, 1, 800), (1024, 24, 2, 1600), (2048, 24, 2, 1600))  # fmt: skip
UPSTREAM_FP8 = (1, 128, 2048)


def _cuda_cases(device, dtype, gen, quick):
    upstream = UPSTREAM[:2] + UPSTREAM[-2:-1] if quick else UPSTREAM
    for rows, Hq, Hkv, page in upstream:
        yield attention_case(_id(rows, Hq, Hkv, 256, page, 2051, dtype), rows, Hq, Hkv, 256, page, 2051,
                             dtype=dtype, device=device, gen=gen, padding=3 if rows in (16, 513) else 0)  # fmt: skip
    for rows in () if quick else UPSTREAM_FP8:
        for kv_dtype in FP8_DTYPES:
            yield attention_case(_id(rows, 24, 2, 256, 1600, 2051, kv_dtype), rows, 24, 2, 256, 1600, 2051,
                                 dtype=dtype, device=device, gen=gen, kv_dtype=kv_dtype)  # fmt: skip
    for D in (64, 128):
        yield attention_case(_id(64, 32, 4, D, 64, 1000, dtype, "-eager"), 64, 32, 4, D, 64, 1000, dtype=dtype,
                             device=device, gen=gen, gate="eager", counts=True, kv_halves=False)  # fmt: skip
    if not quick:
        yield attention_case("R48-H16x1-D128-P16-W300-nogate-counts", 48, 16, 1, 128, 16, 300, dtype=dtype,
                             device=device, gen=gen, gate=None, counts=True)  # fmt: skip
        yield attention_case("R5-H8x8-D32-P5-W21-padding", 5, 8, 8, 32, 5, 21, dtype=dtype, device=device,
                             gen=gen, padding=4, scale=0.3)  # fmt: skip


def _small_cases(device, dtype, gen, quick):
    """Shapes the interpreter runs in seconds: every group size class, holes, counts, padding, gates."""
    shapes = [
        ("R1-H4x1-D16-P7-W37", 1, 4, 1, 16, 7, 37, {}),
        ("R9-H6x1-D32-P16-W70-eager-counts", 9, 6, 1, 32, 16, 70, {"gate": "eager", "counts": True}),
        ("R12-H8x2-D64-P5-W40-nogate-pad", 12, 8, 2, 64, 5, 40, {"gate": None, "padding": 3}),
        ("R40-H16x1-D16-P8-W33-counts", 40, 16, 1, 16, 8, 33, {"counts": True, "kv_halves": False}),
    ]
    for case_id, rows, Hq, Hkv, D, page, W, kw in shapes[:2] if quick else shapes:
        yield attention_case(case_id, rows, Hq, Hkv, D, page, W, dtype=dtype, device=device, gen=gen, **kw)
    if not quick:
        yield attention_case("R0-H4x1-D16-P4-W8", 0, 4, 1, 16, 4, 8, dtype=dtype, device=device, gen=gen, reqs=1)
        yield from _edge_cases(device, dtype, gen)


def _edge_cases(device, dtype, gen):
    """Arguments a kernel must survive: no entries (W = 0), a table of no requests (every row padding),
    indices at the int32 limit, counts below 0 and past W."""
    base = attention_case("edge", 3, 4, 1, 16, 4, 8, dtype=dtype, device=device, gen=gen, counts=True).args
    int32 = {"dtype": torch.int32, "device": device}
    for case_id, position, value in (
        ("edge-W0", 4, torch.zeros((3, 0), **int32)),
        ("edge-no-requests", 5, torch.zeros((0, 3), **int32)),
        ("edge-int32-max-index", 4, torch.full((3, 8), 2**31 - 1, **int32)),
        ("edge-counts-out-of-range", 7, torch.tensor([-5, 100, 3], **int32)),
    ):
        args = list(base)
        args[position] = value
        yield Case(case_id, tuple(args))


@op.inputs
def _inputs(device: torch.device, dtype: torch.dtype, *, quick: bool = False, seed: int = 0):
    gen = make_generator(seed)
    if device.type == "cuda":
        yield from _cuda_cases(device, dtype, gen, quick)
    yield from _small_cases(device, dtype, gen, quick)


# ------------------------------------------------------------- bench grids
GRID_ROWS = (1, 16, 64, 256, 1024, 4096)
GRID_HEADS = ((24, 2), (64, 4))
CONTEXT, GRID_PAGE = 32768, 1024
MAX_BENCH_REQS = 16


def _grid_case(device, dtype, seed, rows, Hq, Hkv, D, W, kv_dtype) -> Case:
    return attention_case(
        _id(rows, Hq, Hkv, D, GRID_PAGE, W, kv_dtype), rows, Hq, Hkv, D, GRID_PAGE, W, dtype=dtype,
        device=device, gen=make_generator(seed), kv_dtype=kv_dtype, reqs=min(rows, MAX_BENCH_REQS),
        pages_per_req=CONTEXT // GRID_PAGE, short_every=0, empty_last=False, holes=0.0, overlap=0.0, distinct=True,
    )  # fmt: skip


def _grid(device, dtype, points):
    """Lazy cases (a bench case holds a 32k-token cache of up to 2 GiB), each seeded by its place."""
    for seed, (rows, Hq, Hkv, D, W, kv) in enumerate(points):
        yield LazyCase(_id(rows, Hq, Hkv, D, GRID_PAGE, W, kv),
                       functools.partial(_grid_case, device, dtype, seed, rows, Hq, Hkv, D, W, kv))  # fmt: skip


# every row count at both head layouts and both head sizes, fp8 e4m3 at three row counts; W 2048 only (a
# smaller selection runs the same kernel over fewer bytes)
op.grid("default")(lambda device, dtype: _grid(device, dtype, [
    *((rows, Hq, Hkv, D, 2048, dtype) for Hq, Hkv in GRID_HEADS for D in (128, 256) for rows in GRID_ROWS),
    *((rows, 24, 2, D, 2048, torch.float8_e4m3fn) for D in (128, 256) for rows in (1, 64, 1024)),
]))  # fmt: skip
# decode (one row), a prefill chunk (64 rows) and the fp8 cache; 1024 rows is left to the default grid: its
# candidates' compiles were the quick bench's longest task (benchmarks/results/h100/sweeps/main_job_times.txt)
op.grid("quick")(lambda device, dtype: _grid(device, dtype, [
    (1, 24, 2, 256, 2048, dtype), (64, 24, 2, 256, 2048, dtype), (64, 24, 2, 256, 2048, torch.float8_e4m3fn),
]))  # fmt: skip


def _bytes(out, q, k_cache, v_cache, logical_indices, block_table, token_to_req, counts=None, scale=None,
           output_gate=None, gate_rounding="fused", k_scale=None, v_scale=None) -> int:  # fmt: skip
    """Q, the gate and the output once; each row's selected K and V (its valid entries, as the op defines
    them: rows that select the same slot count it each); the indices.

    Rows of one request that share slots can be served from L2, so a call may beat this bound; the
    bench grid spreads rows over 16 requests, so from 1024 rows on they share slots."""
    _, _, valid = physical_slots(logical_indices, block_table, token_to_req, counts, k_cache.shape[1],
                                 k_cache.shape[0])  # fmt: skip
    Hkv, D = k_cache.shape[2], k_cache.shape[3]
    moved = int(valid.sum()) * Hkv * D * k_cache.element_size() * 2
    moved += q.numel() * q.element_size() * (3 if output_gate is not None else 2)
    return moved + logical_indices.numel() * 4 + token_to_req.numel() * 4


op.cost(bytes=_bytes)
